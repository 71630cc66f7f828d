"""The agent's tools over a files workspace.

Arguments that name a file the workspace started with (to read, delete or move) or a folder
(to list or search) accept only those names; paths to write and destinations are free.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from ratchet.envs.choices import closed
from ratchet.envs.files.workspace import FilesWorld
from ratchet.envs.files.world import config_values, ini_values, json_values
from ratchet.tool import ToolError

_MAX_READ_CHARS = 20_000
_MAX_MATCHES = 100


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
