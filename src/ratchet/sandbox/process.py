"""A sandboxed command that stays running: one line in, one line out, for as long as it lives.

:meth:`ratchet.sandbox.Sandbox.run` runs a command to its end; some confined code is a server
instead (an env module written by a model answers requests for a whole run), and starting a
confined process costs a few tenths of a second. :meth:`ratchet.sandbox.Sandbox.start` starts
it once, under the same confinement and limits, and returns a :class:`SandboxProcess` that
exchanges newline-terminated messages with it. The limits of :class:`~ratchet.sandbox.Limits`
hold for the process's whole life (its ``timeout_s`` is its lifetime); each exchange has its
own deadline, and a reply longer than the byte limit, a missed deadline or an exit kills it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections import deque
from typing import NoReturn

__all__ = ["SandboxProcess", "SandboxProcessError", "kill_group"]

_STDERR_TAIL_BYTES = 4096


class SandboxProcessError(RuntimeError):
    """The sandboxed process died, missed a deadline or broke the line protocol; it is killed."""


class SandboxProcess:
    """A command running confined in a sandbox, answering one line for each line it is sent.

    Made by :meth:`ratchet.sandbox.Sandbox.start`; not thread-safe (callers serialise).

    Args:
        process: The launcher process, its stdin and stdout the command's.
        status_fd: The launcher's status pipe (closed with the process).
        reply_bytes: The longest reply line accepted.
    """

    def __init__(self, process: subprocess.Popen[bytes], status_fd: int, reply_bytes: int) -> None:
        self._process = process
        self._status_fd = status_fd
        self._reply_bytes = reply_bytes
        self._pending = bytearray()
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        assert process.stdout is not None and process.stderr is not None
        for stream in (process.stdout, process.stderr):
            os.set_blocking(stream.fileno(), False)

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return self._process.poll() is None

    def exchange(self, line: str, timeout_s: float) -> str:
        """Send ``line`` and return the next line the process writes (without its newline).

        Raises:
            SandboxProcessError: If the process has exited, does not answer within
                ``timeout_s``, or writes a line over the byte limit; it is killed, and the
                message ends with what it last wrote to stderr.
        """
        if "\n" in line:
            raise ValueError("a message to a sandboxed process must be one line")
        process = self._process
        assert process.stdin is not None
        try:
            process.stdin.write(line.encode() + b"\n")
            process.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._fail("it has exited")
        return self._read_line(time.monotonic() + timeout_s)

    def stderr_tail(self) -> str:
        """The last few kilobytes the process wrote to stderr."""
        return b"".join(self._stderr).decode("utf-8", "replace")

    def close(self) -> None:
        """Kill the process and everything it started (idempotent)."""
        kill_group(self._process)
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self._status_fd >= 0:
            os.close(self._status_fd)
            self._status_fd = -1

    def _read_line(self, deadline: float) -> str:
        process = self._process
        assert process.stdout is not None and process.stderr is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            selector.register(process.stderr, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                if len(self._pending) > self._reply_bytes:
                    self._fail(f"its reply is over {self._reply_bytes} bytes")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._fail("it did not answer in time")
                for key, _ in selector.select(remaining):
                    chunk = os.read(key.fd, 65_536)
                    if not chunk:
                        if key.fileobj is process.stdout:
                            self._fail("it has exited")
                        selector.unregister(key.fileobj)
                    elif key.fileobj is process.stdout:
                        self._pending.extend(chunk)
                    else:
                        self._keep_stderr(chunk)
        reply, _, rest = bytes(self._pending).partition(b"\n")
        if len(reply) > self._reply_bytes:
            self._fail(f"its reply is over {self._reply_bytes} bytes")
        self._pending = bytearray(rest)
        return reply.decode("utf-8", "replace")

    def _keep_stderr(self, chunk: bytes) -> None:
        self._stderr.append(chunk)
        self._stderr_size += len(chunk)
        while self._stderr_size - len(self._stderr[0]) >= _STDERR_TAIL_BYTES:
            self._stderr_size -= len(self._stderr.popleft())

    def _fail(self, why: str) -> NoReturn:
        self.close()
        tail = self.stderr_tail().strip()
        raise SandboxProcessError(
            f"the sandboxed process failed: {why}" + (f"; its stderr ends:\n{tail}" if tail else "")
        )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill a launcher's process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
