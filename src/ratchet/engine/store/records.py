"""The store's records (runs, agent versions, gate decisions), their rows, and its error type."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from ratchet.core.trajectory import Trajectory

RunStatus = Literal["running", "done", "failed", "interrupted"]
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)


class StoreError(Exception):
    """A store cannot be opened or a request names something the store does not hold."""


@dataclass(frozen=True)
class Run:
    """One run: a batch of rollouts, an evaluation, or an improvement loop.

    Attributes:
        id: Unique id, e.g. ``"eval-20250101-120000-3f2a"``.
        kind: What the run does (``"eval"``, ``"run"``, ``"improve"``...).
        config: The JSON-serialisable settings the run was started with.
        status: ``running``, ``done``, ``failed`` or ``interrupted``.
        created: Unix time the run started.
    """

    id: str
    kind: str
    config: dict[str, Any]
    status: RunStatus
    created: float


@dataclass(frozen=True)
class AgentVersion:
    """One saved agent in the lineage tree.

    Attributes:
        id: Version id, e.g. ``"v3"``.
        parent: The version it was derived from; ``None`` for a root.
        lever: The lever that produced it (``"base"`` for a root).
        path: The agent directory.
        created: Unix time it was recorded.
        metadata: JSON-serialisable facts, e.g. the gate numbers and the trajectory ids it
            learned from.
    """

    id: str
    parent: str | None
    lever: str
    path: Path
    created: float
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Decision:
    """One gate decision, accepted or not, with the numbers behind it.

    Attributes:
        id: Row id, increasing in the order decisions were made.
        run_id: The improvement run it belongs to.
        round: The loop round.
        lever: The lever that proposed the candidate.
        candidate: The candidate's version id.
        incumbent: The version it was compared against.
        accepted: Whether the candidate replaced the incumbent.
        numbers: JSON-serialisable statistics (scores, deltas, p-value, regressions...).
        created: Unix time of the decision.
    """

    id: int
    run_id: str
    round: int
    lever: str
    candidate: str
    incumbent: str
    accepted: bool
    numbers: dict[str, Any]
    created: float


def run_from_row(row: Sequence[Any]) -> Run:
    """Build a run from a ``SELECT id, kind, config, status, created`` row."""
    return Run(id=row[0], kind=row[1], config=json.loads(row[2]), status=row[3], created=row[4])


def decision_from_row(row: Sequence[Any]) -> Decision:
    """Build a decision from a row of the ``decisions`` table's columns, in table order."""
    return Decision(
        id=row[0],
        run_id=row[1],
        round=row[2],
        lever=row[3],
        candidate=row[4],
        incumbent=row[5],
        accepted=bool(row[6]),
        numbers=json.loads(row[7]),
        created=row[8],
    )


RUN_SELECT = "SELECT id, kind, config, status, created FROM runs"
VERSION_SELECT = "SELECT id, parent, lever, path, created, metadata FROM agent_versions"
DECISION_SELECT = (
    "SELECT id, run_id, round, lever, candidate, incumbent, accepted, numbers, created"
    " FROM decisions"
)


def insert_trajectory(
    db: sqlite3.Connection,
    run_id: str,
    trajectory: Trajectory,
    trajectory_json: str,
    task_json: str,
) -> int:
    """Insert one trajectory (and its task, once) and return its id; an existing one wins."""
    task = trajectory.task
    db.execute(
        "INSERT OR IGNORE INTO tasks (id, env, split, family, difficulty, json)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (task.id, task.env, task.split, task.family, task.difficulty, task_json),
    )
    cursor = db.execute(
        "INSERT INTO trajectories (run_id, task_id, agent, model, sample, passed, score,"
        " prompt_tokens, completion_tokens, seconds, error, json, created)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (run_id, task_id, agent, sample) DO NOTHING",
        (
            run_id,
            task.id,
            trajectory.agent,
            trajectory.model,
            trajectory.sample,
            int(trajectory.passed),
            trajectory.score,
            trajectory.prompt_tokens,
            trajectory.completion_tokens,
            trajectory.seconds,
            trajectory.error,
            trajectory_json,
            time.time(),
        ),
    )
    if cursor.rowcount:
        return row_id(cursor)
    row = db.execute(
        "SELECT id FROM trajectories WHERE run_id = ? AND task_id = ? AND agent = ? AND sample = ?",
        (run_id, task.id, trajectory.agent, trajectory.sample),
    ).fetchone()
    return int(row[0])


def row_id(cursor: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just wrote."""
    if cursor.lastrowid is None:  # sqlite3 sets it after every INSERT into a rowid table
        raise StoreError("SQLite did not report the id of the inserted row")
    return cursor.lastrowid
