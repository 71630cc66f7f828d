"""One episode's workspace: a sandbox filled with the generated files of a task's seed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ratchet.envs.files.world import Workspace, generate
from ratchet.sandbox import Limits, Sandbox
from ratchet.task import Task
from ratchet.tool import ToolError

RUN_LIMITS = Limits(cpu_s=2, memory_mb=512, processes=32, timeout_s=5.0, output_bytes=16_384)


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

    def resolve(self, path: str) -> Path:
        """Map a workspace-relative path to a host path, refusing anything outside.

        Raises:
            ToolError: For absolute paths, ``..`` components, or links leading outside.
        """
        cleaned = path.strip()
        if cleaned.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", cleaned):
            raise ToolError(f"{path!r}: use a path relative to the workspace, e.g. 'logs/x.log'")
        if ".." in Path(cleaned).parts:
            raise ToolError(f"{path!r}: '..' is not allowed; paths stay inside the workspace")
        real = Path(os.path.realpath(self.root / cleaned))
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"{path!r} leads outside the workspace")
        return real

    def snapshot(self) -> dict[str, bytes]:
        """Return every regular file in the workspace (relative path to bytes)."""
        files = {}
        for directory, _, names in os.walk(self.root):
            for name in names:
                full = Path(directory) / name
                if full.is_file() and not full.is_symlink():
                    files[full.relative_to(self.root).as_posix()] = full.read_bytes()
        return files


def build(task: Task) -> FilesWorld:
    """Make a fresh sandbox workspace holding the files of ``task``'s world."""
    spec = task.params["world"]
    start = generate(spec["seed"], spec["size"])
    world = FilesWorld(Sandbox(RUN_LIMITS), start)
    try:
        for path, content in start.files.items():
            target = world.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    except BaseException:
        world.sandbox.close()
        raise
    return world


def teardown(world: FilesWorld) -> None:
    """Delete the workspace."""
    world.sandbox.close()
