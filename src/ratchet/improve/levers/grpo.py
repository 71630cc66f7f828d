"""Group-relative policy optimisation, offline, over the incumbent's own stored samples.

The episodes the incumbent played of a training task (its samples and the search's branches)
form a group; a group whose scores are all equal (all passed, or all failed) says nothing about
which actions were better and is skipped. Within a group, credit is given per step: the
episodes form a tree (a branch replays its parent's actions up to where it branched), and each
action's advantage is the value of the state it led to minus that of the state it was taken at,
over the spread of scores there (:mod:`ratchet.improve.explore.credit`); for samples that share
no prefix this is the group-relative advantage of their first action. The trainer
(:meth:`~ratchet.engine.models.base.Trainer.grpo`) continues the incumbent's adapter and clips
each token's probability ratio to the incumbent, which played the samples, with a KL penalty to
it.

Warm start: GRPO pays off only once the agent succeeds sometimes, so it is meant to follow
``rft``: with ``--levers rft,grpo`` the first rounds' ``rft`` adapter, once accepted, is the
incumbent's and so GRPO's starting point; on a cold start its groups are all failures and it
proposes nothing. Only the incumbent's own samples are used, since the ratio is taken to it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ratchet.core.agent import Agent
from ratchet.core.trajectory import Trajectory
from ratchet.engine.models.base import Scored
from ratchet.improve.explore.credit import turn_advantages
from ratchet.improve.levers.base import LeverContext, NoCandidate
from ratchet.improve.levers.pairs import groups
from ratchet.improve.levers.weights import (
    ADAPTER_DIR,
    adapter_candidate,
    as_prompted,
    incumbent_adapter,
    lora_settings,
    played,
    refuse_bad_depth,
    trainer_of,
)


def advantages(group: Sequence[Trajectory]) -> list[float] | None:
    """Group-relative advantages of the samples of one task, or ``None`` if all score alike."""
    scores = [t.score for t in group]
    if len(scores) < 2 or max(scores) == min(scores):
        return None
    mean, spread = statistics.fmean(scores), statistics.pstdev(scores)
    return [(score - mean) / spread for score in scores]


def scored_groups(grouped: dict[str, list[Trajectory]], limit: int) -> list[Scored]:
    """The episodes of the informative groups with their advantages, newest groups first.

    Each episode carries its group-relative advantage and, per turn, the step-level credit of
    the task's tree (:func:`~ratchet.improve.explore.credit.turn_advantages`), which the trainer
    uses in its place: the samples and branches of a task share prefixes, and only the turns
    where they parted say which action was better.
    """
    found: list[Scored] = []
    for samples in reversed(list(grouped.values())):
        relative = advantages(samples)
        if relative is None:
            continue
        steps = turn_advantages(samples)
        found.extend(
            Scored(t, a, per_turn)
            for t, a, per_turn in zip(samples, relative, steps, strict=True)
            if per_turn is not None
        )
        if len(found) >= limit:
            break
    return found


@dataclass(frozen=True)
class GrpoLever:
    """Propose the incumbent's adapter trained with GRPO on its own groups of samples.

    Attributes:
        steps: Optimiser steps per proposal.
        batch_size: Episodes per step.
        learning_rate: AdamW learning rate for the adapter.
        beta: Weight of the KL penalty to the incumbent.
        clip: Each token's probability ratio to the incumbent counts only within ``1 +- clip``.
        lora_rank: LoRA rank of a fresh adapter (a continued one keeps its own).
        lora_depth: Share of the decoder layers, from the top, a fresh adapter is put on (a
            continued one keeps its own).
        max_episodes: Most episodes trained on (whole groups, newest first).
    """

    steps: int = 30
    batch_size: int = 4
    learning_rate: float = 2e-4
    beta: float = 0.04
    clip: float = 0.2
    lora_rank: int = 16
    lora_depth: float = 1.0
    max_episodes: int = 512
    name: str = "grpo"

    def __post_init__(self) -> None:
        """Refuse a LoRA depth outside ``(0, 1]``.

        Raises:
            ValueError: Naming the lever option.
        """
        refuse_bad_depth(self)

    def propose(self, context: LeverContext) -> Agent | None:
        """Train on the scored groups and return the candidate, or ``None`` without one.

        Raises:
            ValueError: If the incumbent's weights cannot be trained (no trainer).
        """
        trainer = trainer_of(context, self.name)
        own = groups(
            t
            for t in context.experience
            if played(context, t) and t.agent == context.incumbent.version
        )
        prompted = {task: as_prompted(group, context.incumbent) for task, group in own.items()}
        episodes = scored_groups(prompted, self.max_episodes)
        if not episodes:
            raise NoCandidate("no task whose samples by the incumbent scored differently")
        settings = lora_settings(self, context.seed, beta=self.beta, clip=self.clip)
        out = context.workdir / ADAPTER_DIR
        result = trainer.grpo(episodes, out, settings, incumbent_adapter(context), context.progress)
        groups_used = len({s.trajectory.task.id for s in episodes})
        return adapter_candidate(
            context, self.name, result, groups=groups_used, beta=self.beta, clip=self.clip
        )
