"""The host side of one sandboxed run: start the launcher, collect its output, read its status.

The launcher (:mod:`ratchet.sandbox.launcher`) confines itself and enforces the run's limits;
the host feeds the command's standard input, reads both output streams up to the byte cap,
kills the process group of a launcher that outlives its deadline, and turns the launcher's
final status into a :class:`SandboxResult`.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet.sandbox.launcher import STATUS_FD_ENV
from ratchet.sandbox.process import kill_group

LAUNCHER = str(Path(__file__).resolve().with_name("launcher.py"))
"""The launcher script, run by the base interpreter with ``-I -S -B``."""

HOST_GRACE_S = 2.0
"""Seconds past a run's deadline before the host kills a launcher that has not ended it."""


class SandboxUnavailable(RuntimeError):
    """This machine cannot confine a sandbox (the message says what is missing)."""


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run produced.

    Attributes:
        exit_code: The command's exit status, or ``None`` if it was killed by a signal.
        stdout: Captured standard output (decoded, truncated at the byte limit).
        stderr: Captured standard error (same rules).
        timed_out: The wall-clock timeout fired.
        killed: Why the command was killed (``"timeout"``, ``"output limit"``,
            ``"cpu time limit"``, ``"file size limit"``, ``"signal N"``), else ``None``.
        duration_s: Wall-clock seconds the run took.
        truncated: Some output was dropped because of the byte limit.
        isolation: The containment layers that were in force.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    killed: str | None = None
    duration_s: float = 0.0
    truncated: bool = False
    isolation: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the command exited 0 without being killed."""
        return self.exit_code == 0 and self.killed is None

    def summary(self) -> str:
        """Render the result as observation text, without timings or host paths."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.truncated:
            parts.append("[output truncated]")
        if self.killed:
            parts.append(f"[killed: {self.killed}]")
        elif self.exit_code:
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts) if parts else "[no output]"


def python_executable() -> str:
    """Return the base interpreter (outside any virtualenv) the sandbox runs Python with."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


def spawn(config: dict[str, Any]) -> tuple[subprocess.Popen[bytes], int]:
    """Start the launcher for ``config``; returns it and the read end of its status pipe."""
    status_read, status_write = os.pipe()
    process = subprocess.Popen(
        [python_executable(), "-I", "-S", "-B", LAUNCHER, json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={STATUS_FD_ENV: str(status_write)},
        pass_fds=(status_write,),
        start_new_session=True,
        cwd=config["cwd"],
    )
    os.close(status_write)
    return process, status_read


def launch(
    config: dict[str, Any], stdin: bytes, timeout_s: float, output_bytes: int
) -> SandboxResult:
    """Run the launcher for ``config`` to the end, feeding it ``stdin``, and report the run.

    Args:
        config: The launcher's configuration (see :meth:`ratchet.sandbox.Sandbox.run`).
        stdin: Bytes written to the command's standard input.
        timeout_s: The run's deadline, which the launcher enforces; the host waits a little
            longer before it kills a launcher that hangs.
        output_bytes: Captured bytes kept per stream; more output kills the command.

    Raises:
        SandboxUnavailable: If the launcher could not confine the command.
    """
    start = time.monotonic()
    process, status_read = spawn(config)
    try:
        out, err, truncated, host_kill = _collect(process, stdin, timeout_s, output_bytes)
        process.wait()
        with os.fdopen(status_read, "rb") as status_file:
            status = json.loads(status_file.read() or b"{}")
    finally:
        kill_group(process)
    duration_s = time.monotonic() - start
    if "error" in status:
        raise SandboxUnavailable(f"sandbox launcher failed: {status['error']}")
    killed = host_kill or status.get("killed") or _signal_reason(status.get("signal"))
    return SandboxResult(
        exit_code=status.get("exit"),
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        timed_out=killed == "timeout",
        killed=killed,
        duration_s=duration_s,
        truncated=truncated,
        isolation=tuple(status.get("isolation", ())),
    )


def _collect(
    process: subprocess.Popen[bytes], stdin: bytes, timeout_s: float, output_bytes: int
) -> tuple[bytes, bytes, bool, str | None]:
    """Read both streams until they close, the deadline passes, or output overflows."""
    assert process.stdin and process.stdout and process.stderr
    try:
        process.stdin.write(stdin)
        process.stdin.close()
    except BrokenPipeError:
        pass
    buffers = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    # The launcher enforces the deadline; this one only catches a launcher that hangs.
    deadline = time.monotonic() + timeout_s + HOST_GRACE_S
    truncated = False
    with selectors.DefaultSelector() as selector:
        for stream in (process.stdout, process.stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                kill_group(process)
                out, err = (bytes(buffers[s.fileno()]) for s in (process.stdout, process.stderr))
                return out, err, truncated, "timeout"
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 65_536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = buffers[key.fd]
                room = output_bytes - len(buffer)
                buffer.extend(chunk[: max(room, 0)])
                if len(chunk) > room:
                    truncated = True
                    kill_group(process)
                    out, err = (
                        bytes(buffers[s.fileno()]) for s in (process.stdout, process.stderr)
                    )
                    return out, err, truncated, "output limit"
    out, err = (bytes(buffers[s.fileno()]) for s in (process.stdout, process.stderr))
    try:
        process.wait(max(deadline - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        kill_group(process)
        return out, err, truncated, "timeout"
    return out, err, truncated, None


def _signal_reason(number: int | None) -> str | None:
    if number is None:
        return None
    if number in (signal.SIGXCPU, signal.SIGKILL):
        # A CPU-bound command reaches the hard RLIMIT_CPU and gets SIGKILL from the kernel.
        return "cpu time limit"
    if number == signal.SIGXFSZ:
        return "file size limit"
    return f"signal {number}"
