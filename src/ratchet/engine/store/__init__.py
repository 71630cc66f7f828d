"""The trajectory store: runs, tasks, trajectories, agent versions and gate decisions in SQLite."""

from ratchet.engine.store.records import (
    RUN_STATUSES,
    AgentVersion,
    Decision,
    Run,
    RunStatus,
    StoreError,
)
from ratchet.engine.store.schema import SCHEMA_VERSION, stored_version
from ratchet.engine.store.store import DB_NAME, Store

__all__ = [
    "DB_NAME",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "AgentVersion",
    "Decision",
    "Run",
    "RunStatus",
    "Store",
    "StoreError",
    "stored_version",
]
