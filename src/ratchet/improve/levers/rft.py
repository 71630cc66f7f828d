"""Rejection-sampling fine-tuning: a LoRA adapter trained on the agent's own verified successes.

Keep the training episodes the verifier passed (hindsight relabels included, which is how a
cold start with no real success still has data; a trimmed success in place of its source, see
:func:`~ratchet.improve.hindsight.lessons`) and hand them to the model's trainer, which
fine-tunes a fresh adapter on their assistant turns (see :mod:`ratchet.engine.models.training`),
each rendered as the candidate will be prompted: with the demonstrations its exemplars give
(see :func:`~ratchet.improve.levers.weights.as_prompted`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ratchet.core.agent import Agent
from ratchet.core.trajectory import Trajectory
from ratchet.improve.hindsight import lessons
from ratchet.improve.levers.base import LeverContext
from ratchet.improve.levers.weights import (
    ADAPTER_DIR,
    adapter_candidate,
    as_prompted,
    lora_settings,
    trainer_of,
)


@dataclass(frozen=True)
class RftLever:
    """Propose the incumbent with a LoRA adapter trained on verified successes.

    Attributes:
        steps: Optimiser steps per proposal.
        batch_size: Sequences per step.
        learning_rate: AdamW learning rate for the adapter.
        lora_rank: LoRA rank (alpha is twice the rank).
        max_examples: Most successes trained on (the newest are kept).
        length_exponent: How batches share out over episode lengths: each length in
            proportion to its number of successes raised to this power, in ``[0, 1]`` (1: as
            verified; 0.5, the default, draws a rarer, longer length more often, so a new
            level's few successes are not drowned by the level below; see
            :func:`~ratchet.engine.models.training.balanced_weights`).
    """

    steps: int = 30
    batch_size: int = 4
    learning_rate: float = 1e-3
    lora_rank: int = 16
    max_examples: int = 512
    length_exponent: float = 0.5
    name: str = "rft"

    def __post_init__(self) -> None:
        """Refuse a length exponent outside ``[0, 1]``.

        Raises:
            ValueError: Naming the lever option and its range.
        """
        if not 0.0 <= self.length_exponent <= 1.0:
            raise ValueError(
                f"rft.length_exponent is from 0 (every length drawn equally) to 1 (as "
                f"verified), not {self.length_exponent}"
            )

    def propose(self, context: LeverContext) -> Agent | None:
        """Train an adapter and return the candidate, or ``None`` without usable successes.

        Raises:
            ValueError: If the incumbent's weights cannot be trained (no trainer).
        """
        trainer = trainer_of(context, self.name)
        lessons = self.successes(context.experience, context.env.name)
        successes = as_prompted(lessons, context.incumbent)
        settings = lora_settings(self, context, length_exponent=self.length_exponent)
        result = trainer.sft(successes, context.workdir / ADAPTER_DIR, settings, context.progress)
        return adapter_candidate(context, self.name, result)

    def successes(self, experience: Sequence[Trajectory], env: str) -> list[Trajectory]:
        """The episodes a proposal trains on: ``env``'s lessons, the newest ``max_examples``."""
        return newest_lessons(experience, env, self.max_examples)


def newest_lessons(experience: Sequence[Trajectory], env: str, limit: int) -> list[Trajectory]:
    """``env``'s verified successes to learn from (see :func:`lessons`), the newest ``limit``."""
    return [t for t in lessons(experience) if t.task.env == env][-limit:]
