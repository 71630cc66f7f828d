"""Comparing shop databases by their changes from the shared seeded base.

Every session starts from the same base store, and triggers log the rowid of every row a
statement touches. A state is therefore fully described by its *delta*: per table, the rows
of the base it no longer has and the rows it has that the base lacks (multisets, so the order
in which rows were written does not matter). Two states of the same base are equal exactly
when their deltas are, which makes the delta's hash a canonical hash of all the tables, at the
cost of reading only the rows that changed.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
from collections import Counter

from ratchet.envs.shop.db import base_rows
from ratchet.envs.shop.schema import SCHEMA, TABLES

Row = tuple[object, ...]
Delta = dict[str, tuple[tuple[Row, ...], tuple[Row, ...]]]


def delta(conn: sqlite3.Connection, db_seed: int) -> Delta:
    """Return, per changed table, the base rows removed and the rows added (each sorted)."""
    changed: dict[str, list[int]] = {}
    for table, row in conn.execute("SELECT DISTINCT tbl, row FROM _changes ORDER BY tbl, row"):
        changed.setdefault(table, []).append(row)
    result: Delta = {}
    for table, rowids in changed.items():
        now = Counter(
            conn.execute(
                f"SELECT * FROM {table} WHERE rowid IN (SELECT row FROM _changes WHERE tbl = ?)",
                (table,),
            )
        )
        before = Counter(base_rows(db_seed, table, rowids))
        removed, added = _sorted(before - now), _sorted(now - before)
        if removed or added:
            result[table] = (removed, added)
    return result


def fingerprint(changes: Delta) -> str:
    """Return the canonical hash of a state given by its :func:`delta`."""
    blob = repr(sorted(changes.items()))
    return hashlib.sha256(blob.encode()).hexdigest()


def differences(expected: Delta, actual: Delta) -> list[str]:
    """Describe how the state ``actual`` differs from ``expected``, one line per row.

    Rows are paired by their first column (the primary key) where the table has one, so a
    changed field reads as ``orders #W1234567: status is 'pending', expected 'cancelled'``;
    ``transactions``, which has no key, reports missing and unexpected rows.
    """
    lines: list[str] = []
    for table in TABLES:
        net: Counter[Row] = Counter()
        for sign, changes in ((1, expected), (-1, actual)):
            removed, added = changes.get(table, ((), ()))
            for row in added:
                net[row] += sign
            for row in removed:
                net[row] -= sign
        missing = _sorted(Counter({r: n for r, n in net.items() if n > 0}))
        extra = _sorted(Counter({r: -n for r, n in net.items() if n < 0}))
        lines += _describe(table, missing, extra)
    return lines


def _describe(table: str, missing: tuple[Row, ...], extra: tuple[Row, ...]) -> list[str]:
    if table == "transactions":
        return [f"transactions: missing row {row}" for row in missing] + [
            f"transactions: unexpected row {row}" for row in extra
        ]
    lines = []
    found = {row[0]: row for row in extra}
    for row in missing:
        if row[0] in found:
            lines.append(f"{table} {row[0]}: {_changed(table, row, found.pop(row[0]))}")
        else:
            lines.append(f"{table}: missing row {row}")
    return lines + [f"{table}: unexpected row {row}" for row in found.values()]


def _sorted(rows: Counter[Row]) -> tuple[Row, ...]:
    return tuple(sorted(rows.elements(), key=repr))


def _changed(table: str, want: Row, got: Row) -> str:
    names = _columns()[table]
    return "; ".join(
        f"{name} is {have!r}, expected {should!r}"
        for name, should, have in zip(names, want, got, strict=True)
        if should != have
    )


@functools.cache
def _columns() -> dict[str, list[str]]:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    names = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in TABLES}
    conn.close()
    return names
