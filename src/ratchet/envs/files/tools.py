"""The agent's tools over a files workspace.

Arguments that name a file the workspace started with (to read, delete or move) or a folder
(to list or search) accept only those names; paths to write and destinations are free. No tool
follows a link, and every read is bounded.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from ratchet.core.tool import ToolError
from ratchet.envs.choices import closed
from ratchet.envs.files.workspace import MAX_FILE_BYTES, MAX_TOTAL_BYTES, FilesWorld
from ratchet.envs.files.world import config_values, ini_values, json_values
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

_MAX_READ_CHARS = 20_000
_MAX_MATCHES = 100
_MAX_LISTED = 500


def tools(world: FilesWorld) -> list[Callable[..., str]]:
    """Return the tools bound to ``world``, their path arguments closed to its names."""
    files = sorted(world.start.files)
    folders = sorted({parent.as_posix() for p in files for parent in Path(p).parents})
    configs = config_values(world.start)
    keys = sorted({key for values in configs.values() for key in values})

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
        text = _read(world, path, 4 * _MAX_READ_CHARS).decode("utf-8", "replace")
        if len(text) > _MAX_READ_CHARS:
            return text[:_MAX_READ_CHARS] + f"\n[truncated at {_MAX_READ_CHARS} characters]"
        return text

    def read_value(path: str, key: str) -> str:
        """Return one value of a config file: a JSON key, or an INI key as section.key.

        Args:
            path: The config file (.json or .ini) relative to the workspace.
            key: The key, e.g. "port" in a JSON config or "server.port" in an INI config.
        """
        values = _values(read_file(path), path)
        if key not in values:
            raise ToolError(f"{path} has no key {key!r}; its keys: {', '.join(values)}")
        return values[key]

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
        if _entry(world, target) is not None:
            raise ToolError(f"{target!r} already exists; delete it first")
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
        return _search(world, pattern, path)

    def run(command: str) -> str:
        """Run a shell command (sh) inside the workspace: no network, limited time and memory.

        Args:
            command: The command line, e.g. "grep -c ERROR logs/*.log".
        """
        result = world.sandbox.run_shell(command)
        if not result.ok:
            raise ToolError(f"command failed:\n{result.summary()}")
        return result.summary()

    return [
        closed(list_files, path=folders),
        closed(read_file, path=files),
        closed(read_value, path=sorted(configs), key=keys),
        write_file,
        closed(move_file, source=files),
        closed(delete_file, path=files),
        closed(search, path=[*folders, *files]),
        run,
    ]


def _values(text: str, path: str) -> dict[str, str]:
    if path.endswith(".ini"):
        return ini_values(text)
    try:
        return json_values(text)
    except ValueError as exc:  # JSONDecodeError included
        raise ToolError(f"{path} is not a valid JSON object: {exc}") from None


def _search(world: FilesWorld, pattern: str, path: str) -> str:
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
    budget = MAX_TOTAL_BYTES
    for name in files:
        if budget <= 0:
            break
        data = _read(world, name, min(MAX_FILE_BYTES, budget))
        budget -= len(data)
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                matches.append(f"{name}:{number}: {line}")
    if len(matches) > _MAX_MATCHES:
        return "\n".join([*matches[:_MAX_MATCHES], f"[{len(matches)} matches, first shown]"])
    return "\n".join(matches) if matches else "no matches"


def _clean(path: str) -> str:
    try:
        return clean_path(path)
    except WorkspacePathError as exc:
        raise ToolError(str(exc)) from None


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
