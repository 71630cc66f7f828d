"""The sandbox's seccomp filter: sockets only for ``AF_UNIX``, no way to a host Unix socket.

Standard library only, like the launcher that loads it by path (see :mod:`.launcher`).
"""

from __future__ import annotations

import os
from typing import Any

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# Per machine: the seccomp audit arch and the syscall numbers the filter looks at.
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "arch": 0xC000003E, "socket": 41, "connect": 42, "sendto": 44, "sendmsg": 46,
        "sendmmsg": 307, "io_uring_setup": 425, "x32": 1,
    },
    "aarch64": {
        "arch": 0xC00000B7, "socket": 198, "connect": 203, "sendto": 206, "sendmsg": 211,
        "sendmmsg": 269, "io_uring_setup": 425, "x32": 0,
    },
}  # fmt: skip


def syscalls() -> dict[str, int] | None:
    """The syscall numbers for this machine, if the filter knows its architecture."""
    return SYSCALLS.get(os.uname().machine)


def seccomp_program(calls: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """Return the BPF filter for the syscall numbers ``calls`` as ``(code, jt, jf, k)``.

    ``socket()`` works only for ``AF_UNIX``. ``connect()``, ``sendmsg()``, ``sendmmsg()`` and
    ``sendto()`` with a destination address fail with ``EACCES``: they are how a process reaches
    a *pathname* Unix socket of the host (a Docker daemon, a session bus), which neither Landlock
    nor the network namespace cover. Socket pairs keep working (``send()`` is ``sendto()``
    without an address). ``io_uring_setup`` (whose operations bypass seccomp) and x32 syscall
    numbers fail too; a foreign architecture is killed.
    """
    import errno

    allow, deny, kill = 0x7FFF0000, 0x00050000 | errno.EACCES, 0x80000000
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    # (label, code, k, jump-if-true label, jump-if-false label); None falls through.
    lines: list[tuple[str, int, int, str | None, str | None]] = [
        ("", ld, 4, None, None),  # seccomp_data.arch
        ("", jeq, calls["arch"], None, "kill"),
        ("", ld, 0, None, None),  # seccomp_data.nr
        *([("", jge, 0x40000000, "deny", None)] if calls["x32"] else []),
        ("", jeq, calls["io_uring_setup"], "deny", None),
        ("", jeq, calls["connect"], "deny", None),
        ("", jeq, calls["sendmsg"], "deny", None),
        ("", jeq, calls["sendmmsg"], "deny", None),
        ("", jeq, calls["socket"], "socket", None),
        ("", jeq, calls["sendto"], "sendto", None),
        ("", ret, allow, None, None),
        ("socket", ld, 16, None, None),  # args[0], the address family (low half)
        ("", jeq, 1, "allow", "deny"),  # AF_UNIX
        ("sendto", ld, 48, None, None),  # args[4], the destination address (low half)
        ("", jeq, 0, None, "deny"),
        ("", ld, 52, None, None),  # (high half)
        ("", jeq, 0, "allow", "deny"),
        ("allow", ret, allow, None, None),  # BPF jumps only forward, hence a second allow
        ("deny", ret, deny, None, None),
        ("kill", ret, kill, None, None),
    ]
    where = {label: index for index, (label, *_) in enumerate(lines) if label}

    def offset(index: int, label: str | None) -> int:
        return 0 if label is None else where[label] - index - 1

    return [
        (code, offset(i, true), offset(i, false), k)
        for i, (_, code, k, true, false) in enumerate(lines)
    ]


def install(libc: Any) -> None:
    """Install the filter for this machine in the calling process (and its children)."""
    import ctypes
    import struct

    calls = syscalls()
    if calls is None:
        return
    program = seccomp_program(calls)
    filters = ctypes.create_string_buffer(
        b"".join(struct.pack("HBBI", code, jt, jf, k) for code, jt, jf, k in program)
    )
    fprog = struct.pack("HxxxxxxQ", len(program), ctypes.addressof(filters))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter failed to install")
