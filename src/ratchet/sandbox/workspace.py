"""Host-side file access inside a workspace that never follows a link.

Agent code in the sandbox can turn any workspace path into a symbolic link to a host file
(``/etc/shadow``, ``/proc/self/environ``, the project's own source). Host-side tools run with
the host's rights, so they must never resolve such a link. Every function here walks the
relative path one component at a time from a directory descriptor, opening each component with
``O_NOFOLLOW``: a link anywhere on the way is refused, and no path can leave the workspace,
whatever the agent changes between calls.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

__all__ = [
    "WorkspacePathError",
    "clean_path",
    "entry",
    "make_folder",
    "read_bytes",
    "remove",
    "rename",
    "walk",
    "write_bytes",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO the agent planted must not block the host.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CHUNK = 1 << 16


class WorkspacePathError(ValueError):
    """A path is not a plain relative path, or leads through a link or a non-folder."""


def clean_path(path: str) -> str:
    """Return ``path`` as a normalised workspace-relative path (``"."`` for the workspace).

    Raises:
        WorkspacePathError: For absolute paths, ``~`` or drive prefixes, and ``..`` parts.
    """
    text = path.strip()
    if text.startswith(("/", "~", "\\")) or (len(text) > 1 and text[1] == ":"):
        raise WorkspacePathError(
            f"{path!r}: use a path relative to the workspace, e.g. 'logs/x.log'"
        )
    parts = [p for p in PurePosixPath(text).parts if p != "."]
    if ".." in parts:
        raise WorkspacePathError(f"{path!r}: '..' is not allowed; paths stay inside the workspace")
    if "\0" in text:
        raise WorkspacePathError(f"{path!r}: paths cannot contain NUL characters")
    return "/".join(parts) or "."


def entry(root: Path, path: str) -> os.stat_result | None:
    """Return the ``lstat`` of ``path`` (a link is reported as a link), or ``None`` if absent."""
    parts = _parts(path)
    if not parts:
        return os.stat(root)
    try:
        with _parent(root, parts, create=False) as parent:
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_bytes(root: Path, path: str, limit: int) -> bytes:
    """Read at most ``limit`` bytes of the regular file at ``path``.

    Raises:
        WorkspacePathError: If the path is a link, a folder or a special file, or leads
            through a link.
        FileNotFoundError: If nothing is there.
    """
    parts = _parts(path)
    if not parts:
        raise WorkspacePathError(f"{path!r} is a folder")
    with _parent(root, parts, create=False) as parent:
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise _explain(exc, path) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise WorkspacePathError(f"{path!r} is {kind}")
        chunks: list[bytes] = []
        size = 0
        while size < limit and (chunk := os.read(fd, min(_CHUNK, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_bytes(root: Path, path: str, data: bytes) -> None:
    """Create or replace the file at ``path`` with ``data``, creating parent folders.

    The data goes to a fresh file that is then renamed over ``path``, so a link planted at
    ``path`` is replaced, never written through.

    Raises:
        WorkspacePathError: If ``path`` is a folder or a parent is a link or a file.
    """
    parts = _parts(path)
    if not parts:
        raise WorkspacePathError(f"{path!r} is a folder")
    with _parent(root, parts, create=True) as parent:
        existing = _lstat_at(parent, parts[-1])
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise WorkspacePathError(f"{path!r} is a folder")
        temporary = f".ratchet-{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, 0o644, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.rename(temporary, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=parent)
            raise


def make_folder(root: Path, path: str) -> None:
    """Create the folder ``path`` and its parents (one that exists already is fine).

    Raises:
        WorkspacePathError: If a part of ``path`` is a link or a file.
    """
    with _directory(root, _parts(path), create=True):
        pass


def remove(root: Path, path: str) -> None:
    """Delete the file or link at ``path`` (a link is removed, never its target).

    Raises:
        WorkspacePathError: If ``path`` is a folder or leads through a link.
        FileNotFoundError: If nothing is there.
    """
    parts = _parts(path)
    if not parts:
        raise WorkspacePathError(f"{path!r} is a folder")
    with _parent(root, parts, create=False) as parent:
        found = _lstat_at(parent, parts[-1])
        if found is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        if stat.S_ISDIR(found.st_mode):
            raise WorkspacePathError(f"{path!r} is a folder")
        os.unlink(parts[-1], dir_fd=parent)


def rename(root: Path, source: str, destination: str) -> None:
    """Move ``source`` to ``destination`` (creating its folders); links are moved as links.

    Raises:
        WorkspacePathError: If either path leads through a link, or ``destination`` exists.
        FileNotFoundError: If ``source`` does not exist.
    """
    src, dst = _parts(source), _parts(destination)
    if not src or not dst:
        raise WorkspacePathError("the workspace itself cannot be moved")
    with _parent(root, src, create=False) as src_parent:
        if _lstat_at(src_parent, src[-1]) is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", source)
        with _parent(root, dst, create=True) as dst_parent:
            if _lstat_at(dst_parent, dst[-1]) is not None:
                raise WorkspacePathError(f"{destination!r} already exists")
            os.rename(src[-1], dst[-1], src_dir_fd=src_parent, dst_dir_fd=dst_parent)


def walk(root: Path, path: str = ".") -> Iterator[tuple[str, os.stat_result]]:
    """Yield ``(relative path, lstat)`` for every non-folder entry under ``path``, sorted.

    Links are yielded as links (their ``lstat``) and never entered.

    Raises:
        WorkspacePathError: If ``path`` is not a folder or leads through a link.
    """
    parts = _parts(path)
    with _directory(root, parts) as top:
        prefix = "/".join(parts)
        yield from _walk_fd(top, prefix)


def _walk_fd(directory: int, prefix: str) -> Iterator[tuple[str, os.stat_result]]:
    for name in sorted(os.listdir(directory)):
        found = _lstat_at(directory, name)
        if found is None:
            continue
        relative = f"{prefix}/{name}" if prefix else name
        if not stat.S_ISDIR(found.st_mode):
            yield relative, found
            continue
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=directory)
        except OSError:
            continue
        try:
            yield from _walk_fd(child, relative)
        finally:
            os.close(child)


def _parts(path: str) -> list[str]:
    cleaned = clean_path(path)
    return [] if cleaned == "." else cleaned.split("/")


@contextlib.contextmanager
def _directory(root: Path, parts: list[str], create: bool = False) -> Iterator[int]:
    """Open the folder ``parts`` below ``root``, one ``O_NOFOLLOW`` step at a time."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                error = exc
                found = _lstat_at(fd, part)
                if found is not None and stat.S_ISLNK(found.st_mode):
                    error = OSError(errno.ELOOP, "link")  # O_DIRECTORY reports links as ENOTDIR
                raise _explain(error, "/".join(parts[: index + 1])) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _parent(root: Path, parts: list[str], create: bool) -> contextlib.AbstractContextManager[int]:
    return _directory(root, parts[:-1], create)


def _lstat_at(directory: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _explain(exc: OSError, path: str) -> Exception:
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return WorkspacePathError(
            f"{path!r} is a symbolic link; file tools do not follow links, which could lead "
            "outside the workspace"
        )
    if exc.errno == errno.ENOTDIR:
        return WorkspacePathError(f"{path!r} is not a folder")
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(errno.ENOENT, "no such file or folder", path)
    return exc
