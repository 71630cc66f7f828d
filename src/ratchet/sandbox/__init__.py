"""Isolation for code the agent runs: one temporary workspace, no network, hard limits.

A :class:`Sandbox` owns a fresh temporary directory (its *workspace*) and runs commands in it.
Each run starts a small launcher (:mod:`ratchet.sandbox.launcher`, run as a script by the base
interpreter with ``-I -S``) which applies, before executing the command:

- **namespaces**: a new user namespace (so limits bind even when the host runs as root: the
  sandbox runs as an unprivileged kernel uid), a new network namespace (no interface but a
  down loopback) and a new PID namespace (the command is its init: when it exits or is killed,
  every process it started dies with it);
- **Landlock** (Linux 5.13+): the workspace is readable and writable; the system directories
  needed to execute programs (``/usr``, ``/bin``, ``/lib*``, the interpreter's prefix) are
  readable, minus every ``site-packages``/``dist-packages`` directory and this project; nothing
  else (``/etc``, ``/home``, ``/root``, ``/tmp``, ``/proc``) can be opened. On kernels with
  Landlock ABI 4+ TCP bind/connect are denied too, and on ABI 6+ signals and abstract unix
  sockets cannot reach outside the sandbox;
- **seccomp**: ``socket()`` for any family but ``AF_UNIX`` and ``io_uring_setup`` fail with
  ``EACCES``, so there is no network even where namespaces are unavailable; so do
  ``connect()``, ``sendmsg()`` and ``sendto()`` to an address, so no Unix socket of the host
  (a Docker daemon, a session bus) can be reached; ``add_key``, ``keyctl`` and ``request_key``
  fail with ``EPERM`` (kernel keyrings are not namespaced), and so do ``unshare``, ``clone``
  and ``setns`` for any new namespace (``clone3`` with ``ENOSYS``);
- **a session keyring of its own**, so ``@s`` inside is not the host's;
- **rlimits**: CPU seconds, address space, processes, open files, file size;
- a scrubbed environment and the workspace as working directory.

The host side enforces a wall-clock timeout (killing the whole process group) and caps the
captured output. Namespaces are used where the kernel allows them and reported in
:attr:`SandboxResult.isolation`; Landlock is required, and its absence raises
:class:`SandboxUnavailable` with an explanation.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ratchet.sandbox.host import (
    LAUNCHER,
    SandboxResult,
    SandboxUnavailable,
    launch,
    python_executable,
    spawn,
)
from ratchet.sandbox.keeper import (
    Keeper,
    KeeperError,
    KeeperSlot,
    remove_tree,
    sweep_stale_workspaces,
    workspace_prefix,
)
from ratchet.sandbox.landlock import landlock_abi
from ratchet.sandbox.process import SandboxProcess, SandboxProcessError
from ratchet.sandbox.readable import readable_dirs

__all__ = [
    "Limits",
    "Quota",
    "Sandbox",
    "SandboxProcess",
    "SandboxProcessError",
    "SandboxResult",
    "SandboxUnavailable",
    "landlock_abi",
    "python_executable",
    "require_landlock",
    "sweep_stale_workspaces",
]

# Landlock access rights (include/uapi/linux/landlock.h).

# The kernel uid a root host runs the sandbox as (inside its user namespace it is root). Root is
# exempt from RLIMIT_NPROC; an unprivileged uid is not.
_SANDBOX_UID = 100_000
_SYSTEM_FILES = ("/etc/ld.so.cache", "/dev/zero", "/dev/urandom", "/dev/random")
_WRITABLE_DEVICES = ("/dev/null",)
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


_KEEPER = KeeperSlot(lambda: Keeper(python_executable(), LAUNCHER, _SANDBOX_UID))


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run.

    Attributes:
        cpu_s: CPU seconds before the kernel kills the command.
        memory_mb: Address-space limit per process.
        processes: Processes and threads the command may have at once.
        open_files: File descriptors per process.
        file_size_mb: Largest file the command may write.
        output_bytes: Captured bytes kept per stream; more output kills the command.
        timeout_s: Wall-clock seconds before every process of the run is killed.
        total_memory_mb: Resident memory of all the run's processes together before they are
            all killed (checked every 50 ms by the launcher); ``None`` for no aggregate cap
            (``memory_mb`` still bounds each process).
    """

    cpu_s: int = 5
    memory_mb: int = 512
    processes: int = 32
    open_files: int = 64
    file_size_mb: int = 16
    output_bytes: int = 65_536
    timeout_s: float = 10.0
    total_memory_mb: int | None = None

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None and value <= 0:
                raise ValueError(f"sandbox limit {name} must be positive; got {value}")


@dataclass(frozen=True)
class Quota:
    """Limits on the workspace itself, for its whole life (not per run).

    Enforced by the kernel where the workspace can be a tmpfs (see :mod:`.keeper`); the host's
    own writes (e.g. an env generating files) count too.

    Attributes:
        disk_mb: Bytes the workspace's files may take up, in MiB.
        inodes: Files, folders and links the workspace may hold.
    """

    disk_mb: int = 64
    inodes: int = 4096

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"sandbox quota {name} must be positive; got {value}")


@dataclass
class Sandbox:
    """A temporary workspace and a way to run commands confined to it.

    Use it as a context manager, or call :meth:`close` to remove the workspace.

    Attributes:
        limits: Default limits for :meth:`run`.
        quota: Disk and inode quota of the workspace.
        directory: The workspace as sandboxed commands see it (shown as ``.`` in output).
        root: Where the host reads and writes the workspace: ``directory`` itself, or, when
            the workspace is a tmpfs held by the keeper, the same folder reached through
            ``/proc/KEEPER/root``. Use :mod:`ratchet.sandbox.workspace` for host-side access
            to files the agent could have replaced with links.
    """

    limits: Limits = field(default_factory=Limits)
    quota: Quota = field(default_factory=Quota)
    directory: Path = field(init=False)
    root: Path = field(init=False)
    _keeper: Keeper | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        require_landlock()
        _KEEPER.sweep_once()
        self.directory = Path(tempfile.mkdtemp(prefix=workspace_prefix())).resolve()
        self.root = self.directory
        keeper = _KEEPER.get()
        if keeper is not None:
            try:
                keeper.mount(self.directory, self.quota.disk_mb, self.quota.inodes)
            except KeeperError:
                keeper = None
        if keeper is not None:
            self._keeper, self.root = keeper, keeper.view(self.directory)
        elif os.geteuid() == 0:
            # The sandbox runs as an unprivileged uid mapped to root of its own namespace;
            # the workspace stays root-owned on the host and root-owned files are mapped in.
            self.directory.chmod(0o700)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the workspace and everything in it (idempotent)."""
        if self._keeper is not None:
            with contextlib.suppress(KeeperError):
                self._keeper.unmount(self.directory)
            self._keeper = None
        remove_tree(str(self.directory))

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> SandboxResult:
        """Run ``argv`` inside the sandbox and return what it produced.

        Host paths in the output are rewritten: the workspace appears as ``.``.

        Args:
            argv: The command and its arguments; the command is looked up on a fixed PATH.
            stdin: Bytes fed to the command's standard input.
            limits: Overrides :attr:`limits` for this run.
            env: Variables set on top of the scrubbed environment (``HOME`` elsewhere, say);
                nothing of the host's environment is passed on.

        Raises:
            ValueError: If ``argv`` is empty.
        """
        limits = limits or self.limits
        config = self._config(argv, limits, env)
        if config is None:
            return SandboxResult(127, "", f"command not found: {argv[0]}\n")
        result = launch(config, stdin, limits.timeout_s, limits.output_bytes)
        return replace(
            result,
            stdout=_hide_root(result.stdout, self.directory),
            stderr=_hide_root(result.stderr, self.directory),
        )

    def run_shell(self, command: str, *, limits: Limits | None = None) -> SandboxResult:
        """Run a ``/bin/sh -c`` command line in the workspace."""
        return self.run(["/bin/sh", "-c", command], limits=limits)

    def run_python(
        self, code: str, *, stdin: bytes = b"", limits: Limits | None = None
    ) -> SandboxResult:
        """Run Python source in the workspace with the base interpreter (isolated mode)."""
        return self.run([python_executable(), "-I", "-S", "-B", "-c", code], stdin=stdin,
                        limits=limits)  # fmt: skip

    def start(
        self, argv: Sequence[str], *, limits: Limits | None = None, reply_bytes: int = 1 << 20
    ) -> SandboxProcess:
        """Start ``argv`` inside the sandbox as a long-lived process that answers line by line.

        The process lives until :meth:`SandboxProcess.close`, an exit, or a limit: ``limits``
        hold for its whole life (``timeout_s`` is its lifetime). See
        :mod:`ratchet.sandbox.process`.

        Args:
            argv: The command and its arguments; the command is looked up on a fixed PATH.
            limits: Overrides :attr:`limits` for this process.
            reply_bytes: The longest reply line accepted.

        Raises:
            ValueError: If ``argv`` is empty or its command is not found.
        """
        config = self._config(argv, limits or self.limits)
        if config is None:
            raise ValueError(f"sandbox: command not found: {argv[0]}")
        process, status_fd = spawn(config)
        return SandboxProcess(process, status_fd, reply_bytes)

    def _config(
        self, argv: Sequence[str], limits: Limits, env: Mapping[str, str] | None = None
    ) -> dict[str, Any] | None:
        """The launcher's configuration for ``argv``; ``None`` if the command is not found."""
        if not argv:
            raise ValueError("sandbox: argv must name a command")
        program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=_SAFE_PATH)
        if program is None:
            return None
        return {
            "argv": [program, *argv[1:]],
            "cwd": str(self.directory),
            "env": {**_scrubbed_env(self.directory), **(env or {})},
            "limits": asdict(limits),
            "readable_dirs": readable_dirs(),
            "readable_files": [p for p in _SYSTEM_FILES if os.path.exists(p)],
            "writable_files": [p for p in _WRITABLE_DEVICES if os.path.exists(p)],
            "writable_dirs": [str(self.directory)],
            "sandbox_uid": _SANDBOX_UID,
            "host_pid": os.getpid(),
            "keeper": self._keeper.namespaces if self._keeper else None,
        }


def require_landlock() -> None:
    """Raise :class:`SandboxUnavailable` unless Landlock can confine the filesystem."""
    if landlock_abi() < 1:
        raise SandboxUnavailable(
            "the sandbox needs Landlock to keep commands inside their workspace: Linux 5.13 or "
            "newer with 'landlock' in the LSM list (check /sys/kernel/security/lsm, or boot "
            "with lsm=...,landlock)"
        )


def _scrubbed_env(root: Path) -> dict[str, str]:
    return {
        "PATH": f"{os.path.dirname(python_executable())}:{_SAFE_PATH}",
        "HOME": str(root),
        "TMPDIR": str(root),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def _hide_root(text: str, root: Path) -> str:
    return text.replace(f"{root}/", "./").replace(str(root), ".")
