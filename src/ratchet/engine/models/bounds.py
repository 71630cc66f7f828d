"""Bounds on a tool call's strings and arrays, so that a whole call fits the reply's token cap.

Constrained decoding keeps a reply a prefix of a valid call, but nothing in a JSON schema stops
a string: a small model writing a free-text argument (``finish(answer)`` above all) can go on
until ``max_tokens`` and leave the string open, and the reply no longer parses (measured on the
embedded model before these bounds: 20-48% of multi-step replies). :func:`bound_arguments`
gives every string without a ``maxLength`` one, and every array without a ``maxItems`` one,
sized so that the longest call the bounded schema allows still fits in the cap:

- the call's fixed text (name, keys, quotes, separators, enum values and constants) is counted
  with the model's tokenizer, with every optional property present;
- a string's characters count one token each: a byte-level BPE token holds at least one byte,
  so ASCII text never takes more tokens than characters (text with many multi-byte characters
  or escapes can, and may still run over);
- a number counts :data:`NUMBER_TOKENS` tokens (JSON schema cannot bound its digits);
- the tokens left, less end-of-turn and a margin for non-canonical tokenizations of the fixed
  text, are shared equally between the strings and arrays that had no bound; an array's share
  leaves each item at least :data:`ITEM_TEXT` characters of text.

Bounds the tool author wrote (``Annotated[str, Field(max_length=...)]``) are kept, and count in
full against the cap. If the cap cannot hold even the fixed text plus :data:`MIN_TEXT`
characters per string, strings get :data:`MIN_TEXT` anyway and a :class:`CapTooSmall` warning
says so: such a call can still run over, and ``max_tokens`` is too low for the tool.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable, Sequence
from typing import Any

NUMBER_TOKENS = 8
"""Tokens reserved for each number (the embedded model's tokenizer spells digits one by one)."""

MIN_TEXT = 8
"""No added ``maxLength`` is below this."""

ITEM_TEXT = 8
"""Characters of text an array's share leaves each item, at least."""


class CapTooSmall(UserWarning):
    """A tool's call cannot fit the reply's token cap even with short strings."""


Count = Callable[[str], int]
"""``count(text) -> tokens`` in the model's tokenizer."""


def bound_arguments(
    name: str, parameters: dict[str, Any], max_tokens: int, count: Count
) -> dict[str, Any]:
    """Return ``parameters`` with a ``maxLength``/``maxItems`` on every unbounded string/array.

    Args:
        name: The tool's name (part of the call's fixed text).
        parameters: The JSON schema of the tool's arguments (not modified).
        max_tokens: The cap on the reply's tokens.
        count: Counts tokens with the model's tokenizer.

    Returns:
        A bounded copy of ``parameters`` (the same schema if nothing was unbounded).
    """
    open_slots = _open(parameters)
    if not open_slots:
        return parameters
    fixed, margin = _fixed(name, parameters, count)
    share = (max_tokens - 1 - margin - fixed) // open_slots
    if share < MIN_TEXT:
        needed = 1 + margin + fixed + MIN_TEXT * open_slots
        warnings.warn(
            f"a call of {name} needs about {needed} tokens with {MIN_TEXT} characters per "
            f"string, more than the reply cap of {max_tokens}: raise --max-reply-tokens or its "
            "calls can be cut off",
            CapTooSmall,
            stacklevel=2,
        )
    return _bound(copy.deepcopy(parameters), share, count)


CAPS = (48, 64, 96, 128, 192, 256)
"""The reply caps :func:`fitted_cap` chooses among."""


def fitted_cap(tools: Sequence[dict[str, Any]], count: Count, ceiling: int) -> int:
    """The smallest of :data:`CAPS` at which a call of every one of ``tools`` fits.

    A call fits when its fixed text and :data:`MIN_TEXT` characters per unbounded string or
    array fit (so the cap never cuts the shortest reasonable call off). With the embedded
    model's tokenizer this gives calc and grid 48, files 64 (``move_file``, ``search``) and
    shop 96 (the ``modify_*`` tools' addresses): the caps their rows had been set to by hand.

    Args:
        tools: OpenAI-format tool schemas.
        count: Counts tokens with the model's tokenizer.
        ceiling: The most the cap may be (the caller's own cap); also the answer when no cap
            of :data:`CAPS` up to it fits every call.
    """
    needed = max((needed_tokens(tool, count) for tool in tools), default=0)
    return next((cap for cap in CAPS if needed <= cap <= ceiling), ceiling)


def needed_tokens(tool: dict[str, Any], count: Count) -> int:
    """The smallest reply cap at which a call of ``tool`` fits (see :func:`fitted_cap`)."""
    function = tool.get("function", tool)
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    fixed, margin = _fixed(str(function.get("name", "")), parameters, count)
    return 1 + margin + fixed + MIN_TEXT * _open(parameters)


def _fixed(name: str, parameters: dict[str, Any], count: Count) -> tuple[int, int]:
    """The tokens of a call's fixed text, and the margin kept for its tokenizations."""
    value, extra = _skeleton(parameters)
    fixed = count(json.dumps({"name": name, "arguments": value}, ensure_ascii=False)) + extra
    return fixed, 2 + fixed // 10


def _kind(schema: dict[str, Any]) -> str | None:
    """The schema's type, ignoring ``null`` in a list of types (``["string", "null"]``)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return str(kinds[0]) if len(kinds) == 1 else None
    return kind if isinstance(kind, str) else None


def _options(schema: dict[str, Any]) -> list[dict[str, Any]]:
    options = schema.get("anyOf") or schema.get("oneOf") or []
    return [o for o in options if isinstance(o, dict)]


def _closed(schema: dict[str, Any]) -> bool:
    return "const" in schema or "enum" in schema


def _open(schema: dict[str, Any]) -> int:
    """How many strings and arrays without a bound the schema holds (arrays count once)."""
    if _closed(schema):
        return 0
    if options := _options(schema):
        return max(_open(option) for option in options)
    kind = _kind(schema)
    if kind == "string":
        return int("maxLength" not in schema)
    if kind == "array":
        items = schema.get("items")
        inner = _open(items) if isinstance(items, dict) else 0
        return int("maxItems" not in schema or inner > 0)
    if kind == "object":
        return sum(_open(p) for p in _properties(schema).values())
    return 0


def _properties(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    properties = schema.get("properties") or {}
    return {k: v for k, v in properties.items() if isinstance(v, dict)}


def _skeleton(schema: dict[str, Any]) -> tuple[Any, int]:
    """Return the shortest value of ``schema`` with every property present, and its extra tokens.

    The extra tokens are what bounded strings, bounded arrays and numbers may add to the text
    of that value.
    """
    if "const" in schema:
        return schema["const"], 0
    if schema.get("enum"):
        return max(schema["enum"], key=lambda v: len(json.dumps(v, ensure_ascii=False))), 0
    if options := _options(schema):
        alternatives = [_skeleton(option) for option in options]
        return max(alternatives, key=lambda s: len(json.dumps(s[0], ensure_ascii=False)) + s[1])
    kind = _kind(schema)
    if kind == "string":
        return "", int(schema.get("maxLength", 0))
    if kind in ("number", "integer"):
        return 0, NUMBER_TOKENS
    if kind == "boolean":
        return False, 0
    if kind == "array":
        items = schema.get("items")
        item, extra = _skeleton(items) if isinstance(items, dict) else (None, 0)
        size = int(schema.get("maxItems", 0))
        return [item] * size, extra * size
    if kind == "object":
        shapes = {key: _skeleton(p) for key, p in _properties(schema).items()}
        return {k: v for k, (v, _) in shapes.items()}, sum(e for _, e in shapes.values())
    return None, 0


def _bound(schema: dict[str, Any], share: int, count: Count) -> dict[str, Any]:
    """Bound ``schema``'s open strings and arrays in place, ``share`` tokens each; return it."""
    if _closed(schema):
        return schema
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            schema[key] = [
                _bound(option, share, count) if isinstance(option, dict) else option
                for option in schema[key]
            ]
    kind = _kind(schema)
    if kind == "string" and "maxLength" not in schema:
        schema["maxLength"] = max(MIN_TEXT, share, int(schema.get("minLength", 0)))
    elif kind == "array" and isinstance(schema.get("items"), dict):
        _bound_array(schema, share, count)
    elif kind == "object":
        for prop in _properties(schema).values():
            _bound(prop, share, count)
    return schema


def _bound_array(schema: dict[str, Any], share: int, count: Count) -> None:
    """Give an array a ``maxItems`` and its items their part of ``share``."""
    items: dict[str, Any] = schema["items"]
    value, extra = _skeleton(items)
    item_cost = count(json.dumps(value, ensure_ascii=False)) + extra + 1  # + the separator
    inner = _open(items)
    if "maxItems" not in schema:
        per_item = item_cost + (ITEM_TEXT if inner else 0)
        size = max(1, share // per_item, int(schema.get("minItems", 0)))
        schema["maxItems"] = size
    if inner:
        item_share = (share // int(schema["maxItems"]) - item_cost) // inner
        _bound(items, item_share, count)
