"""Levers: each turns stored experience into a candidate agent for the gate to judge.

A lever is any object with a ``name`` and a ``propose(context)`` method (see :class:`Lever`);
one module per built-in lever, each readable top to bottom.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.progress import Progress

from ratchet.agent import Agent
from ratchet.env import Env
from ratchet.models.base import Model
from ratchet.trajectory import Trajectory


@dataclass(frozen=True)
class LeverContext:
    """What a lever may use to propose a candidate.

    Attributes:
        env: The env being practised.
        incumbent: The current agent.
        experience: Verified training episodes so far (all agents, hindsight relabels included),
            never probe or test episodes.
        model: The incumbent's backend (``None`` for backends a lever cannot use directly).
        reflector: A model for levers that reason about experience (insights).
        workdir: An empty directory for the candidate's artifacts (becomes its agent directory).
        version: The version id the candidate will get.
        seed: Seed for anything random.
        progress: Progress display for long steps, or ``None``.
    """

    env: Env
    incumbent: Agent
    experience: Sequence[Trajectory]
    model: Model | None
    reflector: Model | None
    workdir: Path
    version: str
    seed: int = 0
    progress: Progress | None = None


class Lever(Protocol):
    """Proposes a candidate agent from experience."""

    @property
    def name(self) -> str:
        """Short name used on the command line and in reports."""
        ...

    def propose(self, context: LeverContext) -> Agent | None:
        """Return a candidate derived from ``context.incumbent``, or ``None`` if it has nothing."""
        ...


def make_levers(
    names: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None = None
) -> list[Lever]:
    """Instantiate built-in levers by name (``exemplars``, ``insights``, ``rft``).

    Args:
        names: Lever names, in the order they propose each round.
        options: Keyword arguments per lever name, e.g. ``{"rft": {"steps": 20}}``.

    Raises:
        ValueError: Naming the unknown lever and the known ones.
    """
    from ratchet.levers.exemplars import ExemplarLever
    from ratchet.levers.insights import InsightLever
    from ratchet.levers.rft import RftLever

    known: dict[str, Callable[..., Lever]] = {
        "exemplars": ExemplarLever,
        "insights": InsightLever,
        "rft": RftLever,
    }
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown lever(s) {', '.join(unknown)}; known: {', '.join(known)}")
    options = options or {}
    return [known[name](**options.get(name, {})) for name in names]
