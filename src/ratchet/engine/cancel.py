"""Stopping generations nobody waits for any more.

A server's client can disconnect, and a server can be asked to shut down, while a reply is
being generated in a batch with other replies. Whoever asks for a completion may pass an
:data:`Abandoned` check per prompt; :func:`watching` makes the checks of the prompts of one
``Model.complete`` call visible to the backend for the duration of that call (on that thread),
and a backend that generates token by token stops the rows :func:`abandoned_rows` reports,
leaving the others of the batch to finish. A backend that never looks simply finishes: the
check is a hint that saves work, never needed for correctness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

Abandoned = Callable[[], bool]
"""``abandoned() -> bool``: whether the asker of one prompt no longer wants its reply."""

_WATCHED: ContextVar[tuple[Abandoned, ...] | None] = ContextVar("abandoned", default=None)


class GenerationAbandoned(Exception):
    """A completion was not computed (or not finished) because its asker had gone."""


def never() -> bool:
    """The check of a prompt whose asker always waits."""
    return False


@contextmanager
def watching(checks: Sequence[Abandoned]) -> Iterator[None]:
    """Within the block, ``checks[i]`` tells whether prompt ``i`` of the call is abandoned."""
    token = _WATCHED.set(tuple(checks))
    try:
        yield
    finally:
        _WATCHED.reset(token)


def abandoned_rows(positions: Sequence[int]) -> Callable[[], list[bool]] | None:
    """For the prompts at ``positions`` of the current call, a function telling which are abandoned.

    ``None`` outside :func:`watching` (nobody can abandon anything).
    """
    checks = _WATCHED.get()
    if checks is None:
        return None
    chosen = [checks[i] if i < len(checks) else never for i in positions]
    return lambda: [check() for check in chosen]
