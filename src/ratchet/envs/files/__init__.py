"""``files``: find, count, extract, transform and reorganise files in a generated workspace.

Each episode gets its own sandbox workspace filled with logs, CSV tables, JSON and INI configs,
notes in nested folders and stray ``.tmp`` files, all generated from the task's seed. The agent
has ``list_files``, ``read_file``, ``write_file``, ``move_file``, ``delete_file``, ``search``
and ``run`` (a shell command confined to the workspace by :mod:`ratchet.sandbox`). The verifier
reads the workspace after the episode: the expected files with the expected contents, removed
files gone, every other starting file untouched, and, for questions, the facts in the answer.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet.core.env import FINISH, SimpleEnv
from ratchet.core.task import Task, TaskSpec
from ratchet.core.tool import Tool, ToolError
from ratchet.core.trajectory import Trajectory
from ratchet.core.verdict import Verdict
from ratchet.envs.files.tasks import sample, solve
from ratchet.envs.files.world import generate
from ratchet.sandbox import Limits, Sandbox

RUN_LIMITS = Limits(cpu_s=2, memory_mb=512, processes=32, timeout_s=5.0, output_bytes=16_384)
_MAX_READ_CHARS = 20_000
_MAX_MATCHES = 100


@dataclass(frozen=True)
class FilesWorld:
    """One episode's workspace.

    Attributes:
        sandbox: The sandbox whose workspace holds the files.
    """

    sandbox: Sandbox

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


def _build(task: Task) -> FilesWorld:
    world = FilesWorld(Sandbox(RUN_LIMITS))
    try:
        spec = task.params["world"]
        for path, content in generate(spec["seed"], spec["size"]).files.items():
            target = world.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    except BaseException:
        world.sandbox.close()
        raise
    return world


def _tools(world: FilesWorld) -> list[Callable[..., str]]:
    def list_files(path: str = ".") -> str:
        """List the files under a folder of the workspace, recursively, with their sizes.

        Args:
            path: Folder relative to the workspace ('.' for all of it).
        """
        folder = world.resolve(path)
        if not folder.is_dir():
            raise ToolError(f"{path!r} is not a folder")
        lines = []
        for directory, dirs, names in os.walk(folder):
            dirs.sort()
            for name in sorted(names):
                full = Path(directory) / name
                size = full.stat().st_size if full.exists() else 0
                lines.append(f"{full.relative_to(world.root).as_posix()} ({size} bytes)")
        return "\n".join(lines) if lines else "(no files)"

    def read_file(path: str) -> str:
        """Return the text of a file.

        Args:
            path: File path relative to the workspace.
        """
        target = world.resolve(path)
        if not target.is_file():
            raise ToolError(f"no such file: {path!r}")
        text = target.read_bytes().decode("utf-8", "replace")
        if len(text) > _MAX_READ_CHARS:
            return text[:_MAX_READ_CHARS] + f"\n[truncated at {_MAX_READ_CHARS} characters]"
        return text

    def write_file(path: str, content: str) -> str:
        """Create or overwrite a text file (parent folders are created).

        Args:
            path: File path relative to the workspace.
            content: The full new content of the file.
        """
        target = world.resolve(path)
        if target.is_dir():
            raise ToolError(f"{path!r} is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return f"wrote {len(content)} characters to {target.relative_to(world.root).as_posix()}"

    def move_file(source: str, destination: str) -> str:
        """Move or rename a file; a destination ending in '/' or naming a folder keeps the name.

        Args:
            source: Existing file path relative to the workspace.
            destination: New path, or a folder to move the file into.
        """
        origin = world.resolve(source)
        if not origin.is_file():
            raise ToolError(f"no such file: {source!r}")
        target = world.resolve(destination)
        if destination.endswith("/") or target.is_dir():
            target = target / origin.name
        if target.exists():
            raise ToolError(f"{destination!r} already exists; delete it first")
        target.parent.mkdir(parents=True, exist_ok=True)
        origin.rename(target)
        moved = target.relative_to(world.root).as_posix()
        return f"moved {origin.relative_to(world.root).as_posix()} to {moved}"

    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: File path relative to the workspace.
        """
        target = world.resolve(path)
        if not target.is_file():
            raise ToolError(f"no such file: {path!r} (folders cannot be deleted)")
        target.unlink()
        return f"deleted {target.relative_to(world.root).as_posix()}"

    def search(pattern: str, path: str = ".") -> str:
        """Find lines matching a regular expression in the files under a folder (like grep -rn).

        Args:
            pattern: A Python regular expression.
            path: Folder or file relative to the workspace.
        """
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"bad regular expression {pattern!r}: {exc}") from None
        base = world.resolve(path)
        found = sorted(p for p in ([base] if base.is_file() else base.rglob("*")) if p.is_file())
        matches = []
        for file in found:
            rel = file.relative_to(world.root).as_posix()
            text = file.read_bytes().decode("utf-8", "replace")
            for number, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    matches.append(f"{rel}:{number}: {line}")
        if len(matches) > _MAX_MATCHES:
            return "\n".join([*matches[:_MAX_MATCHES], f"[{len(matches)} matches, first shown]"])
        return "\n".join(matches) if matches else "no matches"

    def run(command: str) -> str:
        """Run a shell command (sh) inside the workspace: no network, limited time and memory.

        Args:
            command: The command line, e.g. "grep -c ERROR logs/*.log".
        """
        result = world.sandbox.run_shell(command)
        if not result.ok:
            raise ToolError(f"command failed:\n{result.summary()}")
        return result.summary()

    return [list_files, read_file, write_file, move_file, delete_file, search, run]


def _check(task: Task, world: FilesWorld, answer: str | None) -> Verdict:
    params = task.params
    problems = _state_problems(task, world)
    if params["answer"]:
        if answer is None:
            problems.append("no final answer was given")
        else:
            missing = [fact for fact in params["answer"] if not _states(answer, fact)]
            if missing:
                problems.append(f"the final answer does not state {', '.join(missing)}")
    total = len(params["expect"]) + len(params["absent"]) + len(params["answer"])
    return Verdict.of(
        not problems,
        "; ".join(problems[:5]) if problems else "the workspace is as required",
        problems=float(len(problems)),
        requirements=float(total),
    )


def _state_problems(task: Task, world: FilesWorld) -> list[str]:
    params = task.params
    files = world.snapshot()
    problems = []
    for path, want in params["expect"].items():
        if path not in files:
            problems.append(f"{path} is missing")
        elif not _matches(files[path], want):
            problems.append(f"{path} does not have the expected content")
    problems += [f"{path} should be gone" for path in params["absent"] if path in files]
    if params["keep"]:
        spec = params["world"]
        touched = {*params["expect"], *params["absent"]}
        for path, content in generate(spec["seed"], spec["size"]).files.items():
            if path not in touched and files.get(path) != content.encode():
                problems.append(f"{path} was changed or removed but should be untouched")
    return problems


def _matches(data: bytes, want: dict[str, Any]) -> bool:
    text = data.decode("utf-8", "replace")
    if "json" in want:
        try:
            return bool(json.loads(text) == want["json"])
        except json.JSONDecodeError:
            return False
    return _normalise(text) == _normalise(want["text"])


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _states(answer: str, fact: str) -> bool:
    pattern = rf"(?<![\w./-]){re.escape(fact)}(?![\w/-])"
    return re.search(pattern, answer, flags=re.IGNORECASE) is not None


def _relabel(trajectory: Trajectory) -> TaskSpec | None:
    """Name the file changes a trajectory made: moves, deletions and short written files."""
    task = trajectory.task
    if "world" not in task.params:
        return None
    world = _build(task)
    try:
        before = world.snapshot()
        tools = {fn.__name__: Tool.from_function(fn) for fn in _tools(world)}
        for step in trajectory.steps:
            if step.call is None or step.call.name == FINISH:
                break
            tool = tools.get(step.call.name)
            if tool is not None:
                try:
                    tool(step.call.arguments)
                except Exception:  # a failed call changed nothing worth naming
                    continue
        after = world.snapshot()
    finally:
        world.sandbox.close()
    return _describe_changes(task, before, after)


def _describe_changes(
    task: Task, before: dict[str, bytes], after: dict[str, bytes]
) -> TaskSpec | None:
    removed = sorted(p for p in before if p not in after)
    changed = sorted(p for p in after if before.get(p) != after[p])
    moves, deletes, writes = [], [], []
    for path in removed:
        dest = next((p for p in changed if p not in before and after[p] == before[path]), None)
        if dest is not None:
            changed.remove(dest)
            moves.append([path, dest])
        else:
            deletes.append(path)
    expect: dict[str, Any] = {dest: {"text": before[src].decode()} for src, dest in moves}
    for path in changed:
        try:
            text = after[path].decode()
        except UnicodeDecodeError:
            continue
        if 0 < len(text) <= 1500 and text.strip():
            writes.append(path)
            expect[path] = {"text": text}
    parts = [f"move {src} to {dest}" for src, dest in moves]
    parts += [f"delete {path}" for path in deletes]
    parts += [
        f"write {path} containing exactly:\n{expect[path]['text'].strip()}" for path in writes
    ]
    if not parts:
        return None
    params = {
        "world": task.params["world"],
        "expect": expect,
        "absent": removed,
        "moves": moves,
        "answer": [],
        "keep": False,
    }
    family = "transform" if writes else "reorganise"
    instruction = "In the workspace: " + "; ".join(parts) + ". Call finish when done."
    return TaskSpec(instruction, params, family, difficulty=min(5, len(parts)))


def _teardown(world: FilesWorld) -> None:
    world.sandbox.close()


env: SimpleEnv[FilesWorld] = SimpleEnv(
    name="files",
    description="Find, count, extract, transform and reorganise files in a sandboxed workspace.",
    sample=sample,
    build=_build,
    tools=_tools,
    verify=_check,
    oracle=solve,
    max_difficulty=5,
    teardown=_teardown,
    describe=_relabel,
)
