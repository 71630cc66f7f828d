"""The system paths a sandbox may read: system directories minus every installed package.

The sandbox needs ``/usr``, ``/bin``, ``/lib*`` and the interpreter's prefix to run programs,
but must not import the project (its verifiers and reference code) or any installed package.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from functools import cache
from pathlib import Path

__all__ = ["readable_dirs"]

_SYSTEM_DIRS = ("/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32")


@cache
def readable_dirs() -> list[tuple[str, bool]]:
    """System paths the sandbox may read, split around the directories it must not.

    Each entry is ``(path, listing_only)``: a directory on the way to a forbidden one may be
    listed (Python's importer lists the stdlib directory) but its files are granted one by one.
    """
    roots = {os.path.realpath(p) for p in _SYSTEM_DIRS if os.path.isdir(p)}
    roots.add(os.path.realpath(sys.base_prefix))
    roots = {r for r in roots if not any(r != o and r.startswith(o + "/") for o in roots)}
    return sorted(d for root in roots for d in _allow_except(root, _forbidden_dirs()))


def _forbidden_dirs() -> set[str]:
    """Installed packages (the project and its verifiers among them) and the active venv."""
    import glob
    import site

    candidates = {sys.prefix, str(Path(__file__).resolve().parents[1])}
    candidates.update(site.getsitepackages())
    for scheme_path in ("purelib", "platlib"):
        candidates.add(sysconfig.get_paths()[scheme_path])
    for prefix in {sys.base_prefix, "/usr", "/usr/local"}:
        candidates.update(glob.glob(f"{prefix}/lib*/python3*/*-packages"))
        candidates.update(glob.glob(f"{prefix}/lib*/python3/dist-packages"))
    return {os.path.realpath(c) for c in candidates if os.path.isdir(c)}


def _allow_except(root: str, forbidden: set[str]) -> list[tuple[str, bool]]:
    """Return paths covering ``root`` except the forbidden directories beneath it."""
    if root in forbidden:
        return []
    if not any(f.startswith(root + "/") for f in forbidden):
        return [(root, False)]
    allowed = [(root, True)]
    for entry in sorted(os.listdir(root)):
        child = os.path.join(root, entry)
        real = os.path.realpath(child)
        if real != child and os.path.isdir(real):
            continue  # a symlinked directory is reachable under its real path if allowed
        if os.path.isdir(child):
            allowed.extend(_allow_except(child, forbidden))
        else:
            allowed.append((child, False))
    return allowed
