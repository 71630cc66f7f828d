"""Shared fixtures of the env suites."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ratchet import tool


class _Uncached(dict[Any, Any]):
    """A tool-spec cache that never hits."""

    def __contains__(self, key: object) -> bool:
        return False


@pytest.fixture(autouse=True)
def per_world_tool_schemas(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Build each tool's schema from its own signature.

    Built-in envs type arguments per world (``Literal`` of the world's rooms, items, files), but
    ``ratchet.tool`` caches specs by the function's code object, which hands every world the
    schema of the first. Remove this fixture once that cache is keyed by the signature too.
    """
    monkeypatch.setattr(tool, "_SPECS", _Uncached())
    yield
