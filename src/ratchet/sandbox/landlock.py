"""The sandbox's Landlock ruleset: the workspace writable, the system readable, nothing else.

Standard library only, like the launcher that loads it by path (see :mod:`.launcher`); the
host imports :func:`landlock_abi` from here too, to know whether a sandbox can be confined.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from typing import Any

# Landlock access rights and syscalls (include/uapi/linux/landlock.h).
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_TRUNCATE = 1 << 14
_FS_IOCTL_DEV = 1 << 15
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_READ_RIGHTS = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446


@cache
def landlock_abi() -> int:
    """Return the kernel's Landlock ABI version, or 0 if Landlock is unavailable."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    version = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, 1))
    return max(version, 0)


def restrict_filesystem(libc: Any, config: dict[str, Any]) -> None:
    """Confine this process and its children to the paths ``config`` names (a ruleset per ABI).

    Args:
        libc: The C library, loaded with ``use_errno=True``.
        config: The launcher's configuration: ``readable_dirs`` (path and whether only listing
            is allowed), ``readable_files``, ``writable_files`` and ``writable_dirs``.

    Raises:
        OSError: If the kernel refuses the ruleset or one of its rules.
    """
    import ctypes
    import struct

    abi = landlock_abi()
    fs_rights = _FS_RIGHTS_BY_ABI[max(v for v in _FS_RIGHTS_BY_ABI if v <= abi)]
    net_rights = 0b11 if abi >= 4 else 0  # TCP bind and connect: handled, hence denied
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets and signals stay inside
    attr = struct.pack("QQQ", fs_rights, net_rights, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, attr, size, 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    file_rights = _FILE_RIGHTS & fs_rights
    rules = [
        (p, _FS_READ_DIR if listing else _READ_RIGHTS) for p, listing in config["readable_dirs"]
    ]
    rules += [(p, (_FS_EXECUTE | _FS_READ_FILE) & file_rights) for p in config["readable_files"]]
    rules += [(p, file_rights) for p in config["writable_files"]]
    rules += [(p, fs_rights) for p in config["writable_dirs"]]
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        if not os.path.isdir(path):
            rights &= file_rights
        rule = struct.pack("=Qi", rights, fd)
        result = libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, 1, rule, 0)
        os.close(fd)
        if result != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(ruleset)
