"""The store's one SQLite connection: opening it, and running reads and whole transactions.

The database runs in WAL mode, so readers never wait for a writer. Every write is one
``BEGIN IMMEDIATE`` transaction, committed whole or rolled back whole, so a process killed at
any point leaves a consistent database. Threads share the connection under a lock; other
processes take turns writing (SQLite serialises writers; a busy writer is waited for up to
``busy_timeout_s``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ratchet.engine.store.records import StoreError
from ratchet.engine.store.schema import check_openable, migrate


class Database:
    """An open store database, migrated to the current schema, safe to share between threads.

    Args:
        path: The database file; created if missing.
        busy_timeout_s: How long to wait for another process's write to finish.

    Raises:
        StoreError: If the database was written by a newer ratchet, or is not a ratchet store.
    """

    def __init__(self, path: Path, busy_timeout_s: float) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        try:
            self._connection = sqlite3.connect(
                path,
                timeout=busy_timeout_s,
                isolation_level=None,  # autocommit; writes open their own BEGIN IMMEDIATE
                check_same_thread=False,
            )
            # Refuse a newer or foreign database before switching it to WAL, which writes.
            check_openable(self._connection, path)
            self._connection.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode keeps the database consistent after a crash; only the last
            # commits before a power loss (not a process kill) can be lost.
            self._connection.execute("PRAGMA synchronous=NORMAL")
            self._connection.execute("PRAGMA foreign_keys=ON")
            with self.write() as db:
                migrate(db, path)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(f"{path} is not a usable ratchet store: {exc}") from None
        except StoreError:
            self.close()
            raise

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """Run the body as one IMMEDIATE transaction: committed whole or rolled back whole.

        Raises:
            StoreError: If the database is closed.
        """
        with self._lock:
            db = self._open()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Return every row of one query.

        Raises:
            StoreError: If the database is closed.
        """
        with self._lock:
            return self._open().execute(sql, params).fetchall()

    def _open(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StoreError(f"the store at {self.path.parent} is closed")
        return self._connection
