"""``files``: look up, find, count, extract, transform and reorganise files in a workspace.

Each episode gets its own sandbox workspace filled with logs, CSV tables, JSON and INI configs,
notes in nested folders and stray ``.tmp`` files, all generated from the task's seed. The agent
has ``list_files``, ``read_file``, ``read_value``, ``write_file``, ``move_file``,
``delete_file``, ``search`` and ``run`` (a shell command confined to the workspace by
:mod:`ratchet.sandbox`). Difficulty is the number of actions a task needs. The verifier reads
the workspace after the episode: the expected files with the expected contents, removed files
gone, every other starting file untouched, and, for questions, the facts in the answer. A
task's problem is what must be true at the end, not its workspace (:func:`.tasks.problem_key`).
"""

from __future__ import annotations

from ratchet.core.env import SimpleEnv
from ratchet.envs.files.relabel import relabel
from ratchet.envs.files.tasks import MAX_DIFFICULTY, problem_key, sample
from ratchet.envs.files.tools import tools
from ratchet.envs.files.verify import check, oracle
from ratchet.envs.files.workspace import FilesWorld, build, teardown

env: SimpleEnv[FilesWorld] = SimpleEnv(
    name="files",
    description="Look up, find, count, extract, transform and reorganise files in a sandbox.",
    sample=sample,
    build=build,
    tools=tools,
    verify=check,
    oracle=oracle,
    max_difficulty=MAX_DIFFICULTY,
    version="4",
    teardown=teardown,
    describe=relabel,
    problem_key=problem_key,
)

__all__ = ["FilesWorld", "env"]
