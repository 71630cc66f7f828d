"""The lever contract: what a lever gets, and what it must return."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.progress import Progress

from ratchet.core.agent import Agent
from ratchet.core.env import Env
from ratchet.core.trajectory import Trajectory
from ratchet.engine.models.base import Model, Trainer


@dataclass(frozen=True)
class LeverContext:
    """What a lever may use to propose a candidate.

    Attributes:
        env: The env being practised.
        incumbent: The current agent.
        experience: Verified training episodes so far (all agents, hindsight relabels included),
            never probe or test episodes.
        model: The incumbent's backend (``None`` for scripted agents).
        reflector: A model for levers that reason about experience (insights).
        trainer: Trains adapters for the incumbent's model (``None`` where weights cannot be
            trained); the only way a lever reaches weights.
        workdir: An empty directory for the candidate's artifacts (becomes its agent directory).
        version: The version id the candidate will get.
        seed: Seed for anything random.
        progress: Progress display for long steps, or ``None``.
        incumbent_dir: The incumbent's agent directory (its adapter path is relative to it),
            ``None`` for built-in agents.
    """

    env: Env
    incumbent: Agent
    experience: Sequence[Trajectory]
    model: Model | None
    reflector: Model | None
    trainer: Trainer | None
    workdir: Path
    version: str
    seed: int = 0
    progress: Progress | None = None
    incumbent_dir: Path | None = None


class Lever(Protocol):
    """Proposes a candidate agent from experience."""

    @property
    def name(self) -> str:
        """Short name used on the command line and in reports."""
        ...

    def propose(self, context: LeverContext) -> Agent | None:
        """Return a candidate derived from ``context.incumbent``, or ``None`` if it has nothing."""
        ...
