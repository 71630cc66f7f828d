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
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet.core.env import FINISH, SimpleEnv
from ratchet.core.task import Task, TaskSpec
from ratchet.core.tool import Tool, ToolError
from ratchet.core.trajectory import Trajectory
from ratchet.core.verdict import Verdict
from ratchet.envs.files.answer import answer_problems
from ratchet.envs.files.tasks import sample, solve
from ratchet.envs.files.world import generate
from ratchet.sandbox import Limits, Sandbox
from ratchet.sandbox.workspace import (
    WorkspacePathError,
    clean_path,
    entry,
    read_bytes,
    remove,
    rename,
    walk,
    write_bytes,
)

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
_MAX_READ_CHARS = 20_000
_MAX_MATCHES = 100
_MAX_LISTED = 500
# What host-side tools and the verifier read from a workspace the agent controls is bounded:
# per file, and in total for one search or one snapshot.
_MAX_FILE_BYTES = 1 << 20
_MAX_TOTAL_BYTES = 32 << 20


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

    def snapshot(self) -> dict[str, bytes | None]:
        """Return every regular file in the workspace (relative path to bytes).

        Links are left out. A file over 1 MiB, or beyond 32 MiB read in all, maps to ``None``:
        it was not read and matches no expected content.
        """
        files: dict[str, bytes | None] = {}
        budget = _MAX_TOTAL_BYTES
        for path, info in walk(self.root):
            if not stat.S_ISREG(info.st_mode):
                continue
            if info.st_size > min(_MAX_FILE_BYTES, budget):
                files[path] = None
                continue
            data = read_bytes(self.root, path, _MAX_FILE_BYTES + 1)
            budget -= len(data)
            files[path] = data if len(data) <= _MAX_FILE_BYTES else None
        return files


def _clean(path: str) -> str:
    try:
        return clean_path(path)
    except WorkspacePathError as exc:
        raise ToolError(str(exc)) from None


def _build(task: Task) -> FilesWorld:
    world = FilesWorld(Sandbox(RUN_LIMITS))
    try:
        spec = task.params["world"]
        for path, content in generate(spec["seed"], spec["size"]).files.items():
            write_bytes(world.root, path, content.encode())
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
        lines = []
        for name, info in _walk(world, path):
            if stat.S_ISREG(info.st_mode):
                lines.append(f"{name} ({info.st_size} bytes)")
            else:
                lines.append(f"{name} ({'link' if stat.S_ISLNK(info.st_mode) else 'special'})")
            if len(lines) == _MAX_LISTED:
                lines.append(f"[listing stopped at {_MAX_LISTED} entries]")
                break
        return "\n".join(lines) if lines else "(no files)"

    def read_file(path: str) -> str:
        """Return the text of a file.

        Args:
            path: File path relative to the workspace.
        """
        data = _read(world, path, 4 * _MAX_READ_CHARS)
        text = data.decode("utf-8", "replace")
        if len(text) > _MAX_READ_CHARS:
            return text[:_MAX_READ_CHARS] + f"\n[truncated at {_MAX_READ_CHARS} characters]"
        return text

    def write_file(path: str, content: str) -> str:
        """Create or overwrite a text file (parent folders are created).

        Args:
            path: File path relative to the workspace.
            content: The full new content of the file.
        """
        target = _clean(path)
        try:
            write_bytes(world.root, target, content.encode())
        except (WorkspacePathError, OSError) as exc:
            raise ToolError(_reason(exc, path)) from None
        return f"wrote {len(content)} characters to {target}"

    def move_file(source: str, destination: str) -> str:
        """Move or rename a file; a destination ending in '/' or naming a folder keeps the name.

        Args:
            source: Existing file path relative to the workspace.
            destination: New path, or a folder to move the file into.
        """
        origin = _clean(source)
        found = _entry(world, origin)
        if found is None or not stat.S_ISREG(found.st_mode):
            raise ToolError(f"no such file: {source!r}")
        target = _clean(destination)
        folder = _entry(world, target)
        if destination.rstrip().endswith("/") or (folder and stat.S_ISDIR(folder.st_mode)):
            name = origin.rsplit("/", 1)[-1]
            target = name if target == "." else f"{target}/{name}"
        try:
            rename(world.root, origin, target)
        except (WorkspacePathError, OSError) as exc:
            raise ToolError(_reason(exc, destination)) from None
        return f"moved {origin} to {target}"

    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: File path relative to the workspace.
        """
        target = _clean(path)
        found = _entry(world, target)
        if found is None or stat.S_ISDIR(found.st_mode):
            raise ToolError(f"no such file: {path!r} (folders cannot be deleted)")
        try:
            remove(world.root, target)
        except (WorkspacePathError, OSError) as exc:
            raise ToolError(_reason(exc, path)) from None
        return f"deleted {target}"

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
        base = _clean(path)
        found = _entry(world, base)
        if found is not None and stat.S_ISREG(found.st_mode):
            files = [base]
        else:
            files = [name for name, info in _walk(world, base) if stat.S_ISREG(info.st_mode)]
        matches: list[str] = []
        budget = _MAX_TOTAL_BYTES
        for name in files:
            if budget <= 0:
                break
            data = _read(world, name, min(_MAX_FILE_BYTES, budget))
            budget -= len(data)
            for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if regex.search(line):
                    matches.append(f"{name}:{number}: {line}")
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


def _entry(world: FilesWorld, path: str) -> os.stat_result | None:
    try:
        return entry(world.root, path)
    except (WorkspacePathError, OSError) as exc:
        raise ToolError(_reason(exc, path)) from None


def _walk(world: FilesWorld, path: str) -> list[tuple[str, os.stat_result]]:
    try:
        return list(walk(world.root, _clean(path)))
    except FileNotFoundError:
        raise ToolError(f"no such folder: {path!r}") from None
    except (WorkspacePathError, OSError) as exc:
        raise ToolError(_reason(exc, path)) from None


def _read(world: FilesWorld, path: str, limit: int) -> bytes:
    try:
        return read_bytes(world.root, _clean(path), limit)
    except FileNotFoundError:
        raise ToolError(f"no such file: {path!r}") from None
    except (WorkspacePathError, OSError) as exc:
        raise ToolError(_reason(exc, path)) from None


def _reason(exc: Exception, path: str) -> str:
    if isinstance(exc, WorkspacePathError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {path!r}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{path!r}: {exc.strerror.lower()}"
    return f"{path!r}: {exc}"


def _check(task: Task, world: FilesWorld, answer: str | None) -> Verdict:
    params = task.params
    problems = _state_problems(task, world) + answer_problems(answer, params["answer"])
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
        data = files.get(path)
        if path not in files:
            problems.append(f"{path} is missing")
        elif data is None or not _matches(data, want):
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
    task: Task, before: dict[str, bytes | None], after: dict[str, bytes | None]
) -> TaskSpec | None:
    removed = sorted(p for p in before if p not in after)
    changed = sorted(p for p in after if before.get(p) != after[p])
    moves, deletes, writes = [], [], []
    expect: dict[str, Any] = {}
    for path in removed:
        content = before[path]
        dest = next((p for p in changed if p not in before and after[p] == content), None)
        if dest is None or content is None:
            deletes.append(path)
            continue
        changed.remove(dest)
        moves.append([path, dest])
        expect[dest] = {"text": content.decode()}
    for path in changed:
        data = after[path]
        try:
            text = data.decode() if data is not None else ""
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
    version="2",
    teardown=_teardown,
    describe=_relabel,
)
