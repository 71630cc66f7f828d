"""One episode's workspace: a sandbox filled with the generated files of a task's seed.

Everything the host reads from a workspace the agent controls goes through
:mod:`ratchet.sandbox.workspace`: no link is followed, and reads are bounded per file and in
total.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from ratchet.core.task import Task
from ratchet.envs.files.world import Workspace, generate
from ratchet.sandbox import Limits, Sandbox
from ratchet.sandbox.workspace import read_bytes, walk, write_bytes

# 32 processes of 512 MB each would be 16 GB; the total cap keeps a pipeline of memory hogs
# from taking the host's memory.
RUN_LIMITS = Limits(
    cpu_s=2,
    memory_mb=512,
    processes=32,
    timeout_s=5.0,
    output_bytes=16_384,
    total_memory_mb=768,
)
MAX_FILE_BYTES = 1 << 20
MAX_TOTAL_BYTES = 32 << 20


@dataclass(frozen=True)
class FilesWorld:
    """One episode's workspace.

    Attributes:
        sandbox: The sandbox whose workspace holds the files.
        start: The generated files the workspace started with.
    """

    sandbox: Sandbox
    start: Workspace

    @property
    def root(self) -> Path:
        """The workspace directory."""
        return self.sandbox.root

    def snapshot(self) -> dict[str, bytes | None]:
        """Return every regular file in the workspace (relative path to bytes).

        Links are left out. A file over 1 MiB, or beyond 32 MiB read in all, maps to ``None``:
        it was not read and matches no expected content.
        """
        files: dict[str, bytes | None] = {}
        budget = MAX_TOTAL_BYTES
        for path, info in walk(self.root):
            if not stat.S_ISREG(info.st_mode):
                continue
            if info.st_size > min(MAX_FILE_BYTES, budget):
                files[path] = None
                continue
            data = read_bytes(self.root, path, MAX_FILE_BYTES + 1)
            budget -= len(data)
            files[path] = data if len(data) <= MAX_FILE_BYTES else None
        return files


def build(task: Task) -> FilesWorld:
    """Make a fresh sandbox workspace holding the files of ``task``'s world."""
    spec = task.params["world"]
    start = generate(spec["seed"], spec["size"])
    world = FilesWorld(Sandbox(RUN_LIMITS), start)
    try:
        for path, content in start.files.items():
            write_bytes(world.root, path, content.encode())
    except BaseException:
        world.sandbox.close()
        raise
    return world


def teardown(world: FilesWorld) -> None:
    """Delete the workspace."""
    world.sandbox.close()
