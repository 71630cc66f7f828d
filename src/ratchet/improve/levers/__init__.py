"""Levers: each turns stored experience into a candidate agent for the gate to judge.

A lever is any object with a ``name`` and a ``propose(context)`` method (see
:class:`~ratchet.improve.levers.base.Lever`); one module per built-in lever, each readable top to
bottom.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ratchet.improve.levers.base import Lever, LeverContext, NoCandidate, make_play
from ratchet.improve.levers.demos import DemosLever
from ratchet.improve.levers.exemplars import ExemplarLever
from ratchet.improve.levers.grpo import GrpoLever
from ratchet.improve.levers.insights import InsightLever
from ratchet.improve.levers.pairs import PairsLever
from ratchet.improve.levers.prompt import PromptLever
from ratchet.improve.levers.rft import RftLever
from ratchet.improve.levers.skills import SkillLever
from ratchet.improve.levers.tasks import TaskLever

BUILTIN: dict[str, Callable[..., Lever]] = {
    "exemplars": ExemplarLever,
    "insights": InsightLever,
    "rft": RftLever,
    "pairs": PairsLever,
    "grpo": GrpoLever,
    "demos": DemosLever,
    "skills": SkillLever,
    "prompt": PromptLever,
    "tasks": TaskLever,
}

# The built-in levers that train the model's weights: a run whose model cannot be trained
# here (a served model without its weights, a scripted one) leaves them out.
WEIGHT_LEVERS = ("rft", "pairs", "grpo", "demos")

__all__ = [
    "BUILTIN",
    "WEIGHT_LEVERS",
    "Lever",
    "LeverContext",
    "NoCandidate",
    "make_levers",
    "make_play",
]


def make_levers(
    names: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None = None
) -> list[Lever]:
    """Instantiate built-in levers by name.

    Args:
        names: Lever names, in the order they propose each round.
        options: Keyword arguments per lever name, e.g. ``{"rft": {"steps": 20}}``.

    Raises:
        ValueError: Naming the unknown lever and the known ones, or a lever named twice.
    """
    unknown = [name for name in names if name not in BUILTIN]
    if unknown:
        raise ValueError(f"unknown lever(s) {', '.join(unknown)}; known: {', '.join(BUILTIN)}")
    twice = sorted({name for name in names if list(names).count(name) > 1})
    if twice:
        raise ValueError(f"lever(s) named more than once: {', '.join(twice)}")
    options = options or {}
    return [BUILTIN[name](**options.get(name, {})) for name in names]
