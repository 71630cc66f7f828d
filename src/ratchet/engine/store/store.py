"""The store: runs, tasks, trajectories, agent versions and gate decisions in SQLite.

A store is a directory holding ``ratchet.db``: SQLite in WAL mode, with its schema version in
``PRAGMA user_version``. Runs keep their other files (agent directories, reports) beside it.

Every write is its own committed transaction, so a process killed at any point leaves a
consistent database holding everything written before the kill. Trajectories are unique per
``(run_id, task_id, agent, sample)``: writing one twice returns the first one's id, which is
what lets an interrupted run resume without duplicates (see :meth:`Store.done_keys`).

One :class:`Store` may be shared by threads; several processes may open the same directory,
read concurrently and take turns writing (SQLite serialises writers; a busy writer is waited
for up to ``busy_timeout_s``). How the connection does this is in ``connection.py``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ratchet.core.serialise import from_json, to_json
from ratchet.core.trajectory import Trajectory
from ratchet.engine.store.connection import Database
from ratchet.engine.store.records import (
    DECISION_SELECT,
    RUN_SELECT,
    RUN_STATUSES,
    VERSION_SELECT,
    AgentVersion,
    Decision,
    Run,
    RunStatus,
    StoreError,
    decision_from_row,
    insert_trajectory,
    row_id,
    run_from_row,
)
from ratchet.engine.store.schema import stored_version

DB_NAME = "ratchet.db"


class Store:
    """A directory holding ``ratchet.db`` (SQLite, WAL).

    Use it as a context manager, or call :meth:`close` when done. Safe to share between
    threads: one connection, guarded by a lock.

    Args:
        root: The store directory; created with its database if missing.
            Kept as an absolute path in :attr:`root`.
        busy_timeout_s: How long to wait for another process's write to finish.
        create: ``False`` opens only a store that already exists: a missing or empty database
            file is refused untouched (opening one would write the schema into it).

    Raises:
        StoreError: If the database was written by a newer ratchet, or is not a ratchet store,
            or (with ``create=False``) holds no store yet.
    """

    def __init__(
        self, root: Path | str, busy_timeout_s: float = 30.0, *, create: bool = True
    ) -> None:
        self.root = Path(root).resolve()
        self.db_path = self.root / DB_NAME
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"store path {self.root} exists and is not a directory")
        if not create and (not self.db_path.is_file() or stored_version(self.db_path) == 0):
            raise StoreError(f"{self.db_path} holds no ratchet store")
        self.root.mkdir(parents=True, exist_ok=True)
        self._db = Database(self.db_path, busy_timeout_s)

    def close(self) -> None:
        """Close the database connection (idempotent)."""
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # --- runs -------------------------------------------------------------------------------

    def start_run(self, kind: str, config: dict[str, Any], run_id: str | None = None) -> str:
        """Record a new run with status ``running`` and return its id.

        Args:
            kind: What the run does (``"eval"``, ``"run"``, ``"improve"``...).
            config: JSON-serialisable settings, kept so the run can be resumed or audited.
            run_id: An id of your choosing; by default ``KIND-YYYYmmdd-HHMMSS-XXXX``.

        Raises:
            StoreError: If ``run_id`` is already taken.
            TypeError: If ``config`` is not JSON-serialisable.
        """
        created = time.time()
        if run_id is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(created))
            run_id = f"{kind}-{stamp}-{secrets.token_hex(2)}"
        config_json = json.dumps(config, sort_keys=True)
        with self._db.write() as db:
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                raise StoreError(f"run {run_id!r} already exists; pick another id or resume it")
            db.execute(
                "INSERT INTO runs (id, created, kind, config, status) VALUES (?, ?, ?, ?, ?)",
                (run_id, created, kind, config_json, "running"),
            )
        return run_id

    def finish_run(self, run_id: str, status: RunStatus = "done") -> None:
        """Set a run's status: ``done``, ``failed``, ``interrupted``, or ``running`` to resume.

        Raises:
            StoreError: If the run does not exist.
            ValueError: If ``status`` is not a known status.
        """
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {', '.join(RUN_STATUSES)}; got {status!r}")
        with self._db.write() as db:
            cursor = db.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run_id))
            if cursor.rowcount == 0:
                raise StoreError(f"no run {run_id!r} in {self.root}")

    def run(self, run_id: str) -> Run:
        """Return one run.

        Raises:
            StoreError: If the run does not exist.
        """
        rows = self._db.read(f"{RUN_SELECT} WHERE id = ?", (run_id,))
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.root}")
        return run_from_row(rows[0])

    def runs(self, kind: str | None = None) -> list[Run]:
        """Return all runs (optionally of one kind), oldest first."""
        if kind is None:
            return [
                run_from_row(row) for row in self._db.read(f"{RUN_SELECT} ORDER BY created, id")
            ]
        rows = self._db.read(f"{RUN_SELECT} WHERE kind = ? ORDER BY created, id", (kind,))
        return [run_from_row(row) for row in rows]

    # --- trajectories -----------------------------------------------------------------------

    def add_trajectory(self, run_id: str, trajectory: Trajectory) -> int:
        """Store one trajectory in its own transaction and return its id.

        Idempotent on ``(run_id, task_id, agent, sample)``: if that key is already stored, the
        stored trajectory is kept and its id returned.

        Raises:
            StoreError: If the run does not exist.
        """
        return self.add_trajectories(run_id, [trajectory])[0]

    def add_trajectories(self, run_id: str, trajectories: Iterable[Trajectory]) -> list[int]:
        """Store several trajectories in one transaction; return their ids in order.

        Same idempotence as :meth:`add_trajectory`; either all are stored or none.

        Raises:
            StoreError: If the run does not exist.
        """
        rows = [(t, to_json(t), to_json(t.task)) for t in trajectories]
        ids: list[int] = []
        with self._db.write() as db:
            if not db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                raise StoreError(f"no run {run_id!r} in {self.root}; start_run it first")
            for trajectory, trajectory_json, task_json in rows:
                ids.append(insert_trajectory(db, run_id, trajectory, trajectory_json, task_json))
        return ids

    def put_trajectory(self, run_id: str, trajectory: Trajectory) -> int:
        """Store ``trajectory``, replacing the one stored under the same key; return its id.

        For records that grow after they are first written (a served conversation gains turns
        and later a verdict); rollouts use the idempotent :meth:`add_trajectory` instead.

        Raises:
            StoreError: If the run does not exist.
        """
        with self._db.write() as db:
            if not db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                raise StoreError(f"no run {run_id!r} in {self.root}; start_run it first")
            return insert_trajectory(
                db, run_id, trajectory, to_json(trajectory), to_json(trajectory.task), True
            )

    def trajectory(self, trajectory_id: int) -> Trajectory:
        """Return one trajectory by id.

        Raises:
            StoreError: If there is no such trajectory.
        """
        rows = self._db.read("SELECT json FROM trajectories WHERE id = ?", (trajectory_id,))
        if not rows:
            raise StoreError(f"no trajectory {trajectory_id} in {self.root}")
        return from_json(Trajectory, rows[0][0])

    def trajectories(
        self,
        run_id: str | None = None,
        agent: str | None = None,
        env: str | None = None,
        split: str | None = None,
        passed: bool | None = None,
        task_ids: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[tuple[int, Trajectory]]:
        """Return ``(id, trajectory)`` pairs matching every given filter, oldest first.

        Args:
            run_id: Only this run's.
            agent: Only this agent version's.
            env: Only tasks of this env.
            split: Only tasks of this split.
            passed: Only passed (``True``) or only not passed (``False``) episodes.
            task_ids: Only these tasks.
            limit: At most this many.
        """
        where: list[str] = []
        params: list[Any] = []
        for clause, value in (
            ("t.run_id = ?", run_id),
            ("t.agent = ?", agent),
            ("k.env = ?", env),
            ("k.split = ?", split),
            ("t.passed = ?", None if passed is None else int(passed)),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        if task_ids is not None:
            # One JSON parameter instead of one per id: no limit on the number of ids.
            where.append("t.task_id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(sorted(task_ids)))
        sql = "SELECT t.id, t.json FROM trajectories t JOIN tasks k ON k.id = t.task_id"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY t.id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [(row[0], from_json(Trajectory, row[1])) for row in self._db.read(sql, params)]

    def count_trajectories(self, run_id: str | None = None) -> int:
        """Return how many trajectories are stored (of one run, or in all)."""
        if run_id is None:
            return int(self._db.read("SELECT COUNT(*) FROM trajectories")[0][0])
        rows = self._db.read("SELECT COUNT(*) FROM trajectories WHERE run_id = ?", (run_id,))
        return int(rows[0][0])

    def done_keys(self, run_id: str, agent: str) -> set[tuple[str, int]]:
        """Return the ``(task_id, sample)`` pairs already stored for a run and agent.

        A resumed run skips these. Crashed episodes are stored too (with ``error`` set) and so
        count as done: rerunning them belongs in a new run.
        """
        rows = self._db.read(
            "SELECT task_id, sample FROM trajectories WHERE run_id = ? AND agent = ?",
            (run_id, agent),
        )
        return {(row[0], row[1]) for row in rows}

    # --- agent versions ---------------------------------------------------------------------

    def add_agent_version(
        self,
        version: str,
        *,
        parent: str | None,
        lever: str,
        path: Path | str,
        metadata: dict[str, Any] | None = None,
    ) -> AgentVersion:
        """Record a new agent version and return it.

        A path inside the store directory is recorded relative to it, so the store can move.

        Args:
            version: The new version's id.
            parent: The version it was derived from (must already be recorded), or ``None``.
            lever: The lever that made it (``"base"`` for a root).
            path: The agent directory.
            metadata: JSON-serialisable facts (gate numbers, source trajectory ids...).

        Raises:
            StoreError: If ``version`` exists, ``parent`` is unknown, or they are equal.
        """
        if parent == version:
            raise StoreError(f"agent version {version!r} cannot be its own parent")
        stored_path = _relative_to(Path(path), self.root)
        created = time.time()
        metadata_json = json.dumps(metadata or {}, sort_keys=True)
        exists = "SELECT 1 FROM agent_versions WHERE id = ?"
        with self._db.write() as db:
            if db.execute(exists, (version,)).fetchone():
                raise StoreError(f"agent version {version!r} already exists in {self.root}")
            if parent is not None and not db.execute(exists, (parent,)).fetchone():
                raise StoreError(f"parent agent version {parent!r} is not in {self.root}")
            db.execute(
                "INSERT INTO agent_versions (id, parent, lever, path, created, metadata)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (version, parent, lever, str(stored_path), created, metadata_json),
            )
        return AgentVersion(
            version, parent, lever, self._absolute(stored_path), created, metadata or {}
        )

    def agent_version(self, version: str) -> AgentVersion:
        """Return one agent version.

        Raises:
            StoreError: If it is not recorded.
        """
        rows = self._db.read(f"{VERSION_SELECT} WHERE id = ?", (version,))
        if not rows:
            raise StoreError(f"no agent version {version!r} in {self.root}")
        return self._version(rows[0])

    def agent_versions(self) -> list[AgentVersion]:
        """Return every agent version, in the order recorded."""
        return [self._version(row) for row in self._db.read(f"{VERSION_SELECT} ORDER BY rowid")]

    def lineage(self, version: str) -> list[AgentVersion]:
        """Return ``version``'s ancestry, from its root down to ``version`` itself.

        Raises:
            StoreError: If ``version`` is not recorded.
        """
        chain = [self.agent_version(version)]
        while chain[-1].parent is not None:
            chain.append(self.agent_version(chain[-1].parent))
        return chain[::-1]

    # --- gate decisions ---------------------------------------------------------------------

    def add_decision(
        self,
        run_id: str,
        *,
        round: int,
        lever: str,
        candidate: str,
        incumbent: str,
        accepted: bool,
        numbers: dict[str, Any],
    ) -> Decision:
        """Record one gate decision and return it.

        Args:
            run_id: The improvement run.
            round: The loop round.
            lever: The lever that proposed the candidate.
            candidate: The candidate's version id (it need not be a recorded agent version:
                rejected candidates usually are not).
            incumbent: The version it was compared against.
            accepted: Whether the candidate replaced the incumbent.
            numbers: JSON-serialisable statistics behind the decision.

        Raises:
            StoreError: If the run does not exist.
        """
        created = time.time()
        numbers_json = json.dumps(numbers, sort_keys=True)
        with self._db.write() as db:
            if not db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                raise StoreError(f"no run {run_id!r} in {self.root}; start_run it first")
            cursor = db.execute(
                "INSERT INTO decisions (run_id, round, lever, candidate, incumbent, accepted,"
                " numbers, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, round, lever, candidate, incumbent, int(accepted), numbers_json, created),
            )
            decision_id = row_id(cursor)
        return Decision(
            decision_id, run_id, round, lever, candidate, incumbent, accepted, numbers, created
        )

    def decisions(self, run_id: str | None = None) -> list[Decision]:
        """Return gate decisions (of one run, or all), in the order made."""
        if run_id is None:
            rows = self._db.read(f"{DECISION_SELECT} ORDER BY id")
        else:
            rows = self._db.read(f"{DECISION_SELECT} WHERE run_id = ? ORDER BY id", (run_id,))
        return [decision_from_row(row) for row in rows]

    # --- internals --------------------------------------------------------------------------

    def _absolute(self, path: Path) -> Path:
        return path if path.is_absolute() else self.root / path

    def _version(self, row: Sequence[Any]) -> AgentVersion:
        return AgentVersion(
            id=row[0],
            parent=row[1],
            lever=row[2],
            path=self._absolute(Path(row[3])),
            created=row[4],
            metadata=json.loads(row[5]),
        )


def _relative_to(path: Path, root: Path) -> Path:
    """Return ``path`` relative to ``root`` if it lies inside it, else absolute."""
    absolute = path.resolve()
    try:
        return absolute.relative_to(root.resolve())
    except ValueError:
        return absolute
