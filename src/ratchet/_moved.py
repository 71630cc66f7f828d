"""Modules renamed in this release, kept importable from their old paths until the next one.

Each old module is a stub whose module ``__getattr__`` (PEP 562) hands every lookup to the new
module with a ``DeprecationWarning`` naming it, so ``from ratchet.core.records import to_json``
keeps working and says where ``to_json`` lives now.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def moved_attribute(old: str, new: str, name: str) -> Any:
    """Attribute ``name`` of module ``new``, looked up through its old module ``old``.

    Raises:
        AttributeError: If ``new`` has no such attribute.
    """
    value = getattr(importlib.import_module(new), name)
    warnings.warn(
        f"{old} is deprecated and goes in the next release; use {new}.{name}",
        DeprecationWarning,
        stacklevel=3,
    )
    return value
