"""Runs an MCP stdio server so that it cannot outlive the process that started it.

Run by :mod:`ratchet.integrations.mcp_client` as
``python -I -S stdio_guard.py HOST_PID COMMAND [ARG...]`` at the head of a new process group,
this stdlib-only script starts the server with its own standard input and output, and waits
for it. The kernel sends the guard ``SIGUSR1`` when the
thread that started it ends (the host exited or was killed, even by ``SIGKILL``); the guard then
kills its whole process group, the server and anything the server started. It ignores
``SIGTERM``, which the client sends the group to stop the server, so that it lives exactly as
long as the server and exits with its status.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from types import FrameType

_PR_SET_PDEATHSIG = 1


def _kill_group(signum: int, frame: FrameType | None) -> None:
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    """Start the server ``argv[2:]``, wait for it, and return its exit status."""
    signal.signal(signal.SIGUSR1, _kill_group)
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    if os.getppid() != int(argv[1]):  # the host went before the signal was asked for
        _kill_group(signal.SIGUSR1, None)
    try:
        server = subprocess.Popen(argv[2:], restore_signals=True)
    except OSError as exc:
        sys.stderr.write(f"cannot start the MCP server {argv[2]!r}: {exc}\n")
        return 127
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # after the start: the server must not inherit it
    # The server holds the pipes now; the guard's own ends would keep them open after it exits.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    status = server.wait()
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
