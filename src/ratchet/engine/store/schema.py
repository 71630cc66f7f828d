"""The store's SQLite schema, its version, and the migrations that bring old stores up to it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from ratchet.engine.store.records import StoreError

# Migration i takes a database from schema version i to i + 1; version 0 is an empty file.
# Append new migrations, never edit old ones: stores in the field went through them.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            created REAL NOT NULL,
            kind TEXT NOT NULL,
            config TEXT NOT NULL,
            status TEXT NOT NULL
        )""",
        """CREATE TABLE tasks (
            id TEXT PRIMARY KEY,
            env TEXT NOT NULL,
            split TEXT NOT NULL,
            family TEXT NOT NULL,
            difficulty INTEGER NOT NULL,
            json TEXT NOT NULL
        )""",
        """CREATE TABLE trajectories (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL REFERENCES runs(id),
            task_id TEXT NOT NULL REFERENCES tasks(id),
            agent TEXT NOT NULL,
            model TEXT NOT NULL,
            sample INTEGER NOT NULL,
            passed INTEGER NOT NULL,
            score REAL NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            seconds REAL NOT NULL,
            error TEXT,
            json TEXT NOT NULL,
            created REAL NOT NULL,
            UNIQUE (run_id, task_id, agent, sample)
        )""",
        "CREATE INDEX trajectories_agent ON trajectories(agent)",
        "CREATE INDEX trajectories_task ON trajectories(task_id)",
        """CREATE TABLE agent_versions (
            id TEXT PRIMARY KEY,
            parent TEXT REFERENCES agent_versions(id),
            lever TEXT NOT NULL,
            path TEXT NOT NULL,
            created REAL NOT NULL,
            metadata TEXT NOT NULL
        )""",
        """CREATE TABLE decisions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL REFERENCES runs(id),
            round INTEGER NOT NULL,
            lever TEXT NOT NULL,
            candidate TEXT NOT NULL,
            incumbent TEXT NOT NULL,
            accepted INTEGER NOT NULL,
            numbers TEXT NOT NULL,
            created REAL NOT NULL
        )""",
        "CREATE INDEX decisions_run ON decisions(run_id)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


def check_openable(db: sqlite3.Connection, path: Path) -> int:
    """Return the database's schema version, refusing files this ratchet must not touch.

    Raises:
        StoreError: If the schema is newer than :data:`SCHEMA_VERSION`, or the file is an
            SQLite database that ratchet did not create.
    """
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has schema version {version}; this ratchet reads up to "
            f"{SCHEMA_VERSION}. Upgrade ratchet to open it."
        )
    if version == 0 and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        raise StoreError(f"{path} is an SQLite database but not a ratchet store")
    return version


def stored_version(path: Path) -> int:
    """Return the schema version of the database at ``path``, reading it without writing to it.

    Opening a store creates its schema; a reader that must not change a file it may refuse
    (``ratchet report`` on an empty file) asks this first. 0 means no store was ever created in
    the file (it is empty).

    Raises:
        StoreError: If the file cannot be read as an SQLite database, or :func:`check_openable`
            refuses it.
    """
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            return check_openable(db, path)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a usable ratchet store: {exc}") from None


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Apply the migrations ``db`` lacks; the caller holds a write transaction.

    Checking the version inside that transaction matters: two processes opening a new store
    at once must not both create the tables.

    Raises:
        StoreError: As :func:`check_openable`.
    """
    version = check_openable(db, path)
    for statements in MIGRATIONS[version:]:
        for statement in statements:
            db.execute(statement)
    # PRAGMA takes no parameters; SCHEMA_VERSION is our own integer.
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
