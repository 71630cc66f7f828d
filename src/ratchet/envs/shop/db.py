"""The shop's databases: one base store per seed, built once, and a private copy per session.

Each of :data:`DB_SEEDS` seeds builds one small store (tens of customers and products; see
``generate.py``). The base database is built once per seed and cached; every session gets its
own in-memory copy made with SQLite's backup API, which takes well under a millisecond at this
size.
"""

from __future__ import annotations

import functools
import sqlite3
import threading

from ratchet.envs.shop.generate import generate
from ratchet.envs.shop.schema import Store

DB_SEEDS = 64

_COPY_LOCK = threading.Lock()


@functools.lru_cache(maxsize=DB_SEEDS)
def store(db_seed: int) -> Store:
    """Return the base store for ``db_seed`` (built once, then cached).

    Raises:
        ValueError: If ``db_seed`` is outside ``0..DB_SEEDS-1``.
    """
    if not 0 <= db_seed < DB_SEEDS:
        raise ValueError(f"shop db_seed must be in 0..{DB_SEEDS - 1}; got {db_seed}")
    return generate(db_seed)


def fresh_copy(db_seed: int) -> sqlite3.Connection:
    """Return a private in-memory copy of the base database for ``db_seed``."""
    base = store(db_seed)
    copy = sqlite3.connect(":memory:", check_same_thread=False)
    with _COPY_LOCK:
        base.conn.backup(copy)
    return copy


def base_rows(db_seed: int, table: str, rowids: list[int]) -> list[tuple[object, ...]]:
    """Return the base store's rows of ``table`` at ``rowids`` (those that exist)."""
    base = store(db_seed)
    marks = ", ".join("?" * len(rowids))
    with _COPY_LOCK:
        return list(base.conn.execute(f"SELECT * FROM {table} WHERE rowid IN ({marks})", rowids))
