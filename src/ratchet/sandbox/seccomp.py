"""The sandbox's seccomp filter: no network, no host Unix socket, no keyring, no namespaces.

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
        "sendmmsg": 307, "io_uring_setup": 425, "x32": 1, "add_key": 248, "request_key": 249,
        "keyctl": 250, "unshare": 272, "clone": 56, "clone3": 435, "setns": 308,
    },
    "aarch64": {
        "arch": 0xC00000B7, "socket": 198, "connect": 203, "sendto": 206, "sendmsg": 211,
        "sendmmsg": 269, "io_uring_setup": 425, "x32": 0, "add_key": 217, "request_key": 218,
        "keyctl": 219, "unshare": 97, "clone": 220, "clone3": 435, "setns": 268,
    },
}  # fmt: skip
# Every CLONE_NEW* flag. clone() reads its low byte as the exit signal, so there CLONE_NEWTIME
# (0x80) is not a flag and is left out of the mask.
_NEW_NAMESPACES = 0x7E020080
_NEW_NAMESPACES_CLONE = _NEW_NAMESPACES & ~0xFF
_KEYCTL_JOIN_SESSION_KEYRING = 1


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

    The kernel's keyrings are not namespaced, so ``add_key``, ``keyctl`` and ``request_key``
    fail with ``EPERM`` (as in Docker's default profile): no key of the host can be read or
    revoked. So do ``unshare()`` and ``clone()`` asking for any new namespace, and ``setns()``:
    the command cannot make user or network namespaces of its own, where it would be root.
    ``clone3()`` passes its flags in memory the filter cannot read, so it fails with
    ``ENOSYS``, and the C library falls back to ``clone()``.
    """
    import errno

    allow, kill = 0x7FFF0000, 0x80000000
    deny, eperm, enosys = (0x00050000 | code for code in (errno.EACCES, errno.EPERM, errno.ENOSYS))
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
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
        *(("", jeq, calls[name], "eperm", None) for name in ("add_key", "keyctl", "request_key")),
        ("", jeq, calls["setns"], "eperm", None),
        ("", jeq, calls["unshare"], "unshare", None),
        ("", jeq, calls["clone"], "clone", None),
        ("", jeq, calls["clone3"], "enosys", None),
        ("", ret, allow, None, None),
        ("socket", ld, 16, None, None),  # args[0], the address family (low half)
        ("", jeq, 1, "allow", "deny"),  # AF_UNIX
        ("sendto", ld, 48, None, None),  # args[4], the destination address (low half)
        ("", jeq, 0, None, "deny"),
        ("", ld, 52, None, None),  # (high half)
        ("", jeq, 0, "allow", "deny"),
        ("unshare", ld, 16, None, None),  # args[0], the flags (the low half holds them all)
        ("", jset, _NEW_NAMESPACES, "eperm", "allow"),
        ("clone", ld, 16, None, None),
        ("", jset, _NEW_NAMESPACES_CLONE, "eperm", "allow"),
        ("allow", ret, allow, None, None),  # BPF jumps only forward, hence a second allow
        ("deny", ret, deny, None, None),
        ("eperm", ret, eperm, None, None),
        ("enosys", ret, enosys, None, None),
        ("kill", ret, kill, None, None),
    ]
    where = {label: index for index, (label, *_) in enumerate(lines) if label}

    def offset(index: int, label: str | None) -> int:
        return 0 if label is None else where[label] - index - 1

    return [
        (code, offset(i, true), offset(i, false), k)
        for i, (_, code, k, true, false) in enumerate(lines)
    ]


def join_session_keyring(libc: Any) -> bool:
    """Join a new, empty session keyring, leaving the host's; ``True`` if that worked.

    What the process's children then call ``@s`` is that empty keyring, not the host's.
    """
    calls = syscalls()
    if calls is None:
        return False
    return bool(libc.syscall(calls["keyctl"], _KEYCTL_JOIN_SESSION_KEYRING, None) >= 0)


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
