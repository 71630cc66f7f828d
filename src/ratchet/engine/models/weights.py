"""The old path of :mod:`ratchet.engine.models.checkpoints`, kept until the next release.

Every name looked up here comes from the new module with a ``DeprecationWarning``.
"""

from __future__ import annotations

from typing import Any

from ratchet._moved import moved_attribute


def __getattr__(name: str) -> Any:
    return moved_attribute(__name__, "ratchet.engine.models.checkpoints", name)
