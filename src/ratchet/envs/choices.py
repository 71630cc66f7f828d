"""Closed argument sets: tool parameters whose valid values a world can list.

Where a world knows every valid value of an argument (the rooms of a house, the files of a
workspace), typing the parameter as a ``Literal`` of those values puts them in the tool's JSON
schema as an ``enum``. Constrained decoding can then only pick a valid value, and any model sees
the options in the tool's description, so exploration changes the world instead of failing on
invented names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

Fn = TypeVar("Fn", bound=Callable[..., Any])


def closed(fn: Fn, **choices: Iterable[str]) -> Fn:
    """Type each named string parameter of ``fn`` as a ``Literal`` of its valid values.

    The function is statically typed ``str`` (the values are strings); this narrows the
    annotation the tool's schema is built from, per world.

    Args:
        fn: A tool function made fresh in the world's ``tools`` factory: a closure, or a
            module-level function bound to the world with :func:`ratchet.core.tool.bind`
            (never the module-level function itself, whose annotations every world shares).
        **choices: Per parameter name, its valid values (order kept, duplicates dropped).

    Returns:
        ``fn`` itself, annotated.

    Raises:
        ValueError: If a parameter is unknown or given no values.
    """
    for name, values in choices.items():
        if name not in fn.__annotations__:
            raise ValueError(f"{fn.__name__} has no parameter {name!r}")
        unique = tuple(dict.fromkeys(values))
        if not unique:
            raise ValueError(f"{fn.__name__}: no valid values for {name!r}")
        fn.__annotations__[name] = Literal[unique]
    return fn
