"""World states as cells, and what differs between two of them.

A forged env judges a world by its state: whatever its source's ``state(world)`` returns (the
rows of a SQLite database, a Python object, the JSON an MCP server's state tool gives),
flattened into *cells*, one per scalar, keyed by its path (``books/B07/status``). Two states are
equal when their cells are; a call changed the cells whose value differs before and after it, a
row added or removed being all of its cells.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

Cells = dict[str, Any]
"""A flattened state: the path of each scalar (``table/key/column``) and its value."""


def cells(state: Any) -> Cells:
    """Flatten a JSON-like state (nested mappings and lists of scalars) into cells.

    Mapping keys and list positions make the path, joined by ``/`` (a ``/`` or ``~`` inside a
    key is escaped as in JSON pointers); an empty mapping or list is a cell of its own, so an
    empty row still exists.

    Raises:
        TypeError: For a value that is not a scalar, mapping or list (a set, an object), or a
            number that is not finite.
    """
    flat: Cells = {}
    _flatten(state, "", flat)
    return flat


def _flatten(value: Any, path: str, flat: Cells) -> None:
    if isinstance(value, Mapping):
        items: Iterable[tuple[str, Any]] = ((_escape(str(k)), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        flat[path] = _scalar(value, path)
        return
    empty = True
    for key, item in items:
        empty = False
        _flatten(item, f"{path}/{key}" if path else key, flat)
    if empty:
        flat[path] = {} if isinstance(value, Mapping) else []


def _scalar(value: Any, path: str) -> Any:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"state value at {path or '(root)'} is not finite: {value}")
        return value
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(
        f"state value at {path or '(root)'} is a {type(value).__name__}; a state is made of "
        "mappings, lists and scalars"
    )


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def changed(before: Cells, after: Cells) -> set[str]:
    """The paths whose value differs between two states (present in one only included)."""
    return {path for path in before.keys() | after.keys() if _differs(before, after, path)}


def _differs(before: Cells, after: Cells, path: str) -> bool:
    if (path in before) != (path in after):
        return True
    old, new = before[path], after[path]
    return type(old) is not type(new) or old != new


def differences(expected: Cells, actual: Cells, limit: int = 8) -> list[str]:
    """How ``actual`` differs from ``expected``: one line per cell, at most ``limit`` lines."""
    lines = []
    for path in sorted(changed(expected, actual)):
        if path not in actual:
            lines.append(f"{path} is missing, expected {_show(expected[path])}")
        elif path not in expected:
            lines.append(f"{path} is {_show(actual[path])}, expected no such value")
        else:
            lines.append(f"{path} is {_show(actual[path])}, expected {_show(expected[path])}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more"]
    return lines


def describe_change(before: Cells, after: Cells, limit: int = 4) -> str:
    """A short description of what changed: ``books/B07/status: available -> on loan``."""
    parts = []
    for path in sorted(changed(before, after)):
        old = _show(before[path]) if path in before else "(none)"
        new = _show(after[path]) if path in after else "(none)"
        parts.append(f"{path}: {old} -> {new}")
    shown = parts[:limit]
    if len(parts) > limit:
        shown.append(f"and {len(parts) - limit} more")
    return "; ".join(shown)


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)


def scalars(state: Cells, ends: bool = True) -> set[str]:
    """What a world holds, as text: every value, and the parts of every path.

    With ``ends=False`` a path's first part (a table's name, in a database) and last (a
    column's) are left out and only the keys between them (a row's id) count.
    """
    found = {str(v) for v in state.values() if not isinstance(v, dict | list) and v is not None}
    for path in state:
        parts = path.split("/")
        found.update(parts if ends else parts[1:-1])
    return found


def sqlite_state(conn: sqlite3.Connection) -> dict[str, Any]:
    """The rows of every table of a SQLite database, keyed by primary key (else rowid).

    ``{"books": {"B07": {"id": "B07", "status": "on loan"}}}``; a composite key is its parts
    joined by ``:``. SQLite's own tables are left out.
    """
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
    ]
    state: dict[str, Any] = {}
    for table in tables:
        quoted = '"' + table.replace('"', '""') + '"'
        info = list(conn.execute(f"PRAGMA table_info({quoted})"))
        columns = [row[1] for row in info]
        keys = [row[1] for row in sorted(info, key=lambda row: row[5]) if row[5] > 0]
        select = "*" if keys else "rowid AS _rowid_, *"
        cursor = conn.execute(f"SELECT {select} FROM {quoted}")
        rows: dict[str, Any] = {}
        for values in cursor:
            row = dict(zip(([] if keys else ["_rowid_"]) + columns, values, strict=True))
            key = ":".join(str(row[k]) for k in keys) if keys else str(row.pop("_rowid_"))
            rows[key] = row
        state[table] = rows
    return state
