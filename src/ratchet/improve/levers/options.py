"""Lever options: a built-in lever's own settings, set by name for one run.

Each built-in lever is a frozen dataclass whose fields are its settings (``PairsLever.beta``,
``RftLever.steps``, ...), with their defaults; that is their one home. A run sets any of them
as a lever option, ``LEVER.FIELD=VALUE`` on the command line (``--lever-option
pairs.beta=0.1``) or ``{"pairs": {"beta": 0.1}}`` in ``ImproveConfig.lever_options``; each is
checked against the lever's dataclass: the lever, the field and the value's type.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic

from ratchet.improve.levers import BUILTIN

_SETTABLE = (int, float, str, bool)
"""The field types a lever option can set (a lever's other fields are set from Python)."""


def lever_settings(lever: str) -> dict[str, Any]:
    """The settings of built-in lever ``lever`` an option can set: field name to type.

    Raises:
        ValueError: If ``lever`` is not a built-in lever.
    """
    if lever not in BUILTIN:
        raise ValueError(f"unknown lever {lever!r} in a lever option; known: {', '.join(BUILTIN)}")
    kind = typing.cast(Any, BUILTIN[lever])
    hints = typing.get_type_hints(kind)
    return {
        item.name: hints[item.name]
        for item in dataclasses.fields(kind)
        if item.name != "name" and hints[item.name] in _SETTABLE
    }


def parse_lever_options(given: Iterable[str]) -> dict[str, dict[str, str]]:
    """``LEVER.FIELD=VALUE`` texts as ``{lever: {field: value}}`` (values still text).

    Raises:
        ValueError: For a text not of that form, or one setting a field already set.
    """
    options: dict[str, dict[str, str]] = {}
    for text in given:
        target, sep, value = text.partition("=")
        lever, dot, name = target.strip().partition(".")
        if not sep or not dot or not lever or not name or not value.strip():
            raise ValueError(
                f"--lever-option takes LEVER.FIELD=VALUE (e.g. pairs.beta=0.1); got {text!r}"
            )
        if name in options.get(lever, {}):
            raise ValueError(f"--lever-option sets {lever}.{name} twice")
        options.setdefault(lever, {})[name] = value.strip()
    return options


def checked_lever_options(
    options: Mapping[str, Mapping[str, Any]], levers: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """``options`` checked against each lever's dataclass, values converted to its types.

    Text values (from the command line) are converted (``"0.1"`` to ``0.1``, ``"false"`` to
    ``False``); a value that does not fit the field's type is refused, as is a lever option
    for a lever the run does not use.

    Args:
        options: ``{lever: {field: value}}``.
        levers: The run's levers.

    Raises:
        ValueError: Naming the unknown lever, the unknown field (with the lever's settings),
            the lever the run does not use, or the bad value and the type it should have.
    """
    used = list(levers)
    checked: dict[str, dict[str, Any]] = {}
    for lever, values in options.items():
        settings = lever_settings(lever)
        if lever not in used:
            raise ValueError(
                f"a lever option sets {lever}, which is not among the run's levers "
                f"({', '.join(used)})"
            )
        checked[lever] = {}
        for name, value in values.items():
            if name not in settings:
                raise ValueError(
                    f"lever {lever} has no setting {name!r}; its settings: {', '.join(settings)}"
                )
            checked[lever][name] = _converted(f"{lever}.{name}", settings[name], value)
    return checked


def _converted(option: str, kind: type[Any], value: Any) -> Any:
    """``value`` as a ``kind``: text parsed, a Python value checked (a bool is no number)."""
    strict = not isinstance(value, str) and not (kind is float and type(value) is int)
    try:
        return pydantic.TypeAdapter(kind).validate_python(value, strict=strict)
    except pydantic.ValidationError:
        raise ValueError(
            f"lever option {option} takes {'an' if kind is int else 'a'} {kind.__name__}; "
            f"got {value!r}"
        ) from None
