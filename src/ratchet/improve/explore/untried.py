"""Sampling without replacement: tools narrowed so that a reply repeats no tried call.

A branch must take an action not yet taken at its node. Resampling finds one only by luck when
the agent is sure of its call: after training on level 1, calc's agent answers "Compute
(7 / 7) * 8." with ``divide(7, 8)`` at every temperature, and a branch that then gave up the
tried tool (``add``, ``multiply``) could never reach ``divide(7, 7)``. Where a strategy has
copied the arguments (each a closed set of the conversation's values), the calls not tried are
a union of schemas: one taking a first argument no tried call gave, and, for each first
argument a tried call gave, that value with the rest untried, argument by argument (a trie of
the tried calls). The decoder then samples the agent's own choice among untried calls only.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ratchet.engine.models.base import tool_name
from ratchet.improve.explore.copying import closed_values, same_value

MAX_ALTERNATIVES = 32
"""Most schemas a tool's untried calls are split into; past that the tool is left out."""

_ABSENT = object()
"""An optional argument a tried call left out."""


def untried_calls(
    tools: Sequence[dict[str, Any]], tried: Mapping[str, Sequence[Mapping[str, Any]]]
) -> tuple[dict[str, Any], ...]:
    """``tools`` narrowed so that no call repeats one of ``tried``.

    A tool with no tried call stays as it is. A tool with some keeps the calls that differ
    from each: its parameters become ``anyOf`` the untried calls' schemas (see the module).
    An argument that is no closed set (no ``enum`` or ``const``: not copied) can be told apart
    only by a later one, so calls differing there alone are not offered; a tool left with no
    untried call, or split into more than :data:`MAX_ALTERNATIVES` schemas, is left out.

    Args:
        tools: The tools the reply may call, arguments already copied (see
            :func:`~.copying.copy_only`), parameters an object schema or ``anyOf`` of them.
        tried: Each tool's tried calls' arguments, by tool name.
    """
    narrowed = []
    for tool in tools:
        calls = tried.get(tool_name(tool) or "", ())
        if not calls:
            narrowed.append(tool)
            continue
        function = tool.get("function", tool)
        parameters = function.get("parameters") or {"type": "object"}
        options = parameters.get("anyOf", [parameters])
        schemas = [
            alternative
            for option in options
            for alternative in _untried(option, list(option.get("properties") or {}), calls, 0)
        ]
        if not schemas or len(schemas) > MAX_ALTERNATIVES:
            continue
        tool = copy.deepcopy(tool)
        tool.get("function", tool)["parameters"] = (
            schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        )
        narrowed.append(tool)
    return tuple(narrowed)


def _untried(
    option: dict[str, Any], names: list[str], calls: Sequence[Mapping[str, Any]], index: int
) -> list[dict[str, Any]]:
    """Schemas of ``option``'s calls that differ from every one of ``calls``.

    ``calls`` agree with each other, and with every call of ``option``, on the arguments
    before ``names[index]``.
    """
    if not calls:
        return [option]
    if index == len(names):
        return []  # every argument equals one of the calls'
    name = names[index]
    properties = option["properties"]
    required = name in option.get("required", ())
    given = [call.get(name, _ABSENT) for call in calls]
    schemas = []
    closed = closed_values(properties[name])
    if closed is not None:
        other = [v for v in closed if not any(same_value(v, g) for g in given)]
        if other:
            schemas.append(_fixed(option, name, other))
    if not required and all(g is not _ABSENT for g in given):
        schemas.append(_without(option, name))
    distinct: list[object] = []
    for value in given:
        if not any(value is d or same_value(value, d) for d in distinct):
            distinct.append(value)
    for value in distinct:
        if value is _ABSENT:
            if required:
                continue
            fixed = _without(option, name)
        elif closed is not None and not any(same_value(value, v) for v in closed):
            continue  # the option cannot make that call
        else:
            fixed = _fixed(option, name, [value])
        same = [c for c, g in zip(calls, given, strict=True) if g is value or same_value(g, value)]
        schemas += _untried(fixed, names, same, index + 1)
    return schemas


def _fixed(option: dict[str, Any], name: str, values: list[Any]) -> dict[str, Any]:
    """``option`` with argument ``name`` required and taking one of ``values``."""
    fixed = copy.deepcopy(option)
    child = fixed["properties"][name]
    child.pop("const", None)
    child["enum"] = values
    fixed["required"] = sorted({*fixed.get("required", []), name})
    return fixed


def _without(option: dict[str, Any], name: str) -> dict[str, Any]:
    """``option`` with its optional argument ``name`` left out."""
    fixed = copy.deepcopy(option)
    del fixed["properties"][name]
    fixed["additionalProperties"] = False
    return fixed
