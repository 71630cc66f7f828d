"""Workspace quotas and leftovers: the keeper process, and the sweep of dead owners' workspaces.

Where the kernel allows unprivileged user namespaces, one *keeper* process per host process
holds a user and mount namespace in which every workspace is its own tmpfs, limited in size
and inodes. Sandboxed commands join that namespace, so a full disk or millions of files stay
inside the workspace's quota; the host reaches the files through ``/proc/KEEPER/root``. The
keeper exits when the host does (its stdin closes), and its mounts, with everything the agent
wrote, vanish with it. Workspace folders are named after their owner process, so the next
sandbox started on the machine removes the folders of owners that are gone.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ratchet.sandbox.launcher import write_id_maps

__all__ = ["Keeper", "KeeperError", "KeeperSlot", "sweep_stale_workspaces", "workspace_prefix"]

PREFIX = "ratchet-sandbox-"
_OWNED = re.compile(rf"{PREFIX}(\d+)\.(\d+)-.+")


class KeeperError(RuntimeError):
    """The keeper could not be started, or refused a request (the message says why)."""


class Keeper:
    """The host side of one keeper process.

    Attributes:
        pid: The keeper's process id.
        namespaces: ``{"pid": ..., "user": inode, "mnt": inode}``, for launchers to join.
    """

    def __init__(self, python: str, launcher: str, sandbox_uid: int) -> None:
        """Start the keeper and map its user namespace.

        Raises:
            KeeperError: If the kernel refuses the namespaces.
        """
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [python, "-I", "-S", "-B", launcher, "--keep"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C at a terminal must not take it before the host
            cwd="/",
            text=True,
        )
        self.pid = self._process.pid
        try:
            self._expect("unshared")
            write_id_maps(self.pid, sandbox_uid)
            self._send("mapped")
            self._expect("ready")
            self.namespaces = {
                "pid": self.pid,
                "user": os.stat(f"/proc/{self.pid}/ns/user").st_ino,
                "mnt": os.stat(f"/proc/{self.pid}/ns/mnt").st_ino,
            }
        except (OSError, KeeperError, ValueError) as exc:
            self.close()
            raise KeeperError(f"no workspace keeper: {exc}") from None

    def view(self, directory: Path) -> Path:
        """Return the host path through which ``directory`` as the keeper sees it is reached."""
        return Path(f"/proc/{self.pid}/root{directory}")

    def mount(self, directory: Path, size_mb: int, inodes: int) -> None:
        """Make ``directory`` a tmpfs of ``size_mb`` MiB and ``inodes`` inodes for sandboxes.

        Raises:
            KeeperError: If the mount failed or the keeper is gone.
        """
        self._request({"path": str(directory), "size_mb": size_mb, "inodes": inodes})

    def unmount(self, directory: Path) -> None:
        """Drop the tmpfs at ``directory`` and everything in it.

        Raises:
            KeeperError: If the unmount failed or the keeper is gone.
        """
        self._request({"path": str(directory)})

    def alive(self) -> bool:
        """Whether the keeper process still runs."""
        return self._process.poll() is None

    def close(self) -> None:
        """End the keeper (every workspace it holds goes with it)."""
        with contextlib.suppress(OSError):
            if self._process.stdin:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout:
            self._process.stdout.close()

    def _request(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._send(json.dumps(message))
            reply = self._read()
        if "error" in reply:
            raise KeeperError(f"workspace keeper: {reply['error']}")

    def _send(self, line: str) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(line + "\n")
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise KeeperError("the workspace keeper has exited") from None

    def _read(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise KeeperError("the workspace keeper has exited")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _expect(self, key: str) -> None:
        reply = self._read()
        if key not in reply:
            raise KeeperError(str(reply.get("error", reply)))


class KeeperSlot:
    """A process's keeper, started on first use; ``None`` where the kernel refuses one.

    Args:
        start: Starts a keeper (raising :class:`KeeperError` if the kernel refuses).
    """

    def __init__(self, start: Callable[[], Keeper]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._owner = -1
        self._keeper: Keeper | None = None
        self._refused = False
        self._swept = False

    def get(self) -> Keeper | None:
        """Return the live keeper, starting one if there is none (or it died)."""
        with self._lock:
            if self._owner != os.getpid():  # a forked child needs a keeper of its own
                self._owner, self._keeper, self._refused = os.getpid(), None, False
            if self._refused or (self._keeper is not None and self._keeper.alive()):
                return self._keeper
            try:
                self._keeper = self._start()
            except KeeperError:
                self._keeper, self._refused = None, True  # the kernel said no; do not ask again
                return None
            atexit.register(self._keeper.close)
            return self._keeper

    def sweep_once(self) -> None:
        """Run :func:`sweep_stale_workspaces` the first time a process asks."""
        with self._lock:
            if not self._swept:
                self._swept = True
                sweep_stale_workspaces()


def workspace_prefix() -> str:
    """The name prefix of this process's workspaces: its pid and start time, against reuse."""
    pid = os.getpid()
    return f"{PREFIX}{pid}.{_start_time(pid)}-"


def sweep_stale_workspaces(directory: str | None = None) -> list[str]:
    """Remove workspaces whose owner process is gone (e.g. killed with SIGKILL).

    Only folders named by :func:`workspace_prefix`, owned by this user, are considered.

    Args:
        directory: Where workspaces are made; the system's temporary directory by default.

    Returns:
        The paths removed.
    """
    base = directory or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    for entry in entries:
        match = _OWNED.fullmatch(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue
        pid, started = int(match[1]), int(match[2])
        if _start_time(pid) == started:
            continue
        remove_tree(entry.path)
        removed.append(entry.path)
    return removed


def remove_tree(path: str) -> None:
    """Delete a workspace folder, even where the agent took the permissions off its folders."""
    for directory, folders, _ in os.walk(path):
        for folder in folders:
            child = os.path.join(directory, folder)
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(child).st_mode):  # never chmod through a link
                    os.chmod(child, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def _start_time(pid: int) -> int:
    """The process's start time in clock ticks since boot, or -1 if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            return int(stat_file.read().rpartition(b")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return -1
