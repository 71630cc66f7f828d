"""The lever contract: what a lever gets, and what it must return."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from rich.progress import Progress

from ratchet.core.agent import Agent
from ratchet.core.env import Env
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.models.base import Model, Trainer
from ratchet.engine.rollout import RolloutConfig, rollout

Play = Callable[[Agent, Sequence[Task], int], list[Trajectory]]
"""``play(agent, tasks, k) -> trajectories``: training episodes a lever plays while proposing."""

OfferTasks = Callable[[Sequence[Task], Mapping[str, int]], None]
"""``offer_tasks(tasks, rejected)``: new training tasks for the curriculum, and the proposals
turned away, counted by reason."""


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
        play: Plays ``k`` samples of each of ``tasks`` (training tasks only) with an agent that
            shares the incumbent's weights (its prompt, memory or skills may differ), and
            stores the episodes with the run (they count in its cost and join the experience).
            ``None`` where a lever may not play episodes.
        offer_tasks: Hands new, validated training tasks to the run's curriculum (and the
            count of rejected proposals by reason to its record); ``None`` where there is no
            curriculum to offer them to.
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
    play: Play | None = None
    offer_tasks: OfferTasks | None = None


class NoCandidate(Exception):
    """Raised by a lever's ``propose`` to say why it has no candidate this round.

    Returning ``None`` is enough; raising this instead puts the reason (``str(exc)``) in the
    round's record, the log and the report, e.g. ``NoCandidate("no verified success yet")``.
    """


class Lever(Protocol):
    """Proposes a candidate agent from experience."""

    @property
    def name(self) -> str:
        """Short name used on the command line and in reports."""
        ...

    def propose(self, context: LeverContext) -> Agent | None:
        """Return a candidate derived from ``context.incumbent``, or ``None`` if it has nothing.

        Raises:
            NoCandidate: Optionally, instead of returning ``None``, to say why.
        """
        ...


def make_play(
    env: Env,
    model: Model | None,
    config: RolloutConfig | None = None,
    *,
    seed: int = 0,
    record: Callable[[Sequence[Trajectory]], object] | None = None,
    progress: Progress | None = None,
    label: str = "lever",
) -> Play:
    """A :data:`Play` for :class:`LeverContext`: rollouts on ``model``, recorded by ``record``.

    Every call uses the same sampling ``seed``, so two agents played on the same tasks meet the
    same sampling randomness (their episodes pair up). Each episode is marked with
    ``metadata["lever"] = label``.

    Raises:
        ValueError: When asked to play a task outside the ``train`` split: levers learn from
            training tasks only.
    """

    def play(agent: Agent, tasks: Sequence[Task], k: int) -> list[Trajectory]:
        held_out = [task.id for task in tasks if task.split != "train"]
        if held_out:
            raise ValueError(f"levers may play training tasks only; got {', '.join(held_out)}")
        played = rollout(
            env, tasks, agent, model, config, k=k, seed=seed, progress=progress, description=label
        )
        marked = [replace(t, metadata={**t.metadata, "lever": label}) for t in played]
        if record is not None:
            record(marked)
        return marked

    return play
