"""One serialiser for every record: frozen dataclasses to JSON-ready dicts and back.

Records (tasks, tool calls, verdicts, trajectories, agents) are plain frozen dataclasses;
pydantic's ``TypeAdapter`` reads their type hints to dump them to JSON-compatible data and to
validate data back into them, nested records, tuples and ``Literal`` fields included. A top-level
record carries a ``schema`` number so that a newer file is refused with a clear message instead
of being misread.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import pydantic

SCHEMA = 2
"""Version of the record layout; bumped when a field changes meaning or is removed."""

T = TypeVar("T")


class RecordError(ValueError):
    """A serialised record cannot be read: malformed, of another kind, or from a newer Ratchet."""


_ADAPTERS: dict[type[Any], pydantic.TypeAdapter[Any]] = {}


def _adapter(kind: type[Any]) -> pydantic.TypeAdapter[Any]:
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = pydantic.TypeAdapter(kind)
    return _ADAPTERS[kind]


def to_dict(record: object) -> dict[str, Any]:
    """Return ``record`` as JSON-compatible data, with the ``schema`` number first."""
    data: dict[str, Any] = _adapter(type(record)).dump_python(record, mode="json")
    return {"schema": SCHEMA, **data}


def from_dict(kind: type[T], data: Any) -> T:
    """Validate ``data`` (from :func:`to_dict`) into a ``kind`` record.

    Raises:
        RecordError: If ``data`` is not a mapping, was written by a newer schema, or does not
            fit ``kind`` (the message names each bad field).
    """
    if not isinstance(data, dict):
        raise RecordError(f"a {kind.__name__} record must be a JSON object, got {type(data)}")
    schema = data.get("schema", SCHEMA)
    if not isinstance(schema, int) or schema > SCHEMA:
        raise RecordError(
            f"{kind.__name__} record has schema {schema!r}; this Ratchet reads up to {SCHEMA}. "
            "Upgrade Ratchet to read it."
        )
    fields = {key: value for key, value in data.items() if key != "schema"}
    try:
        record: T = _adapter(kind).validate_python(fields)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(record)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise RecordError(f"not a valid {kind.__name__} record: {problems}") from None
    return record


def to_json(record: object) -> str:
    """Serialise ``record`` to a JSON string with sorted keys."""
    return json.dumps(to_dict(record), sort_keys=True)


def from_json(kind: type[T], text: str) -> T:
    """Parse a JSON string written by :func:`to_json` into a ``kind`` record.

    Raises:
        RecordError: If the text is not JSON or not a valid record.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"not a {kind.__name__} record: invalid JSON ({exc})") from None
    return from_dict(kind, data)
