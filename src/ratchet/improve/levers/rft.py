"""Rejection-sampling fine-tuning: a LoRA adapter trained on the agent's own verified successes.

Keep the training episodes the verifier passed (hindsight relabels included, which is how a
cold start with no real success still has data; a trimmed success in place of its source, see
:func:`~ratchet.improve.hindsight.lessons`) and hand them to the model's trainer, which
fine-tunes a fresh adapter on their assistant turns (see :mod:`ratchet.engine.models.training`),
each rendered as the candidate will be prompted: with the demonstrations its exemplars give
(see :func:`~ratchet.improve.levers.weights.as_prompted`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ratchet.core.agent import Agent
from ratchet.core.trajectory import Trajectory
from ratchet.improve.hindsight import lessons
from ratchet.improve.levers.base import LeverContext
from ratchet.improve.levers.weights import (
    ADAPTER_DIR,
    adapter_candidate,
    as_prompted,
    lora_settings,
    refuse_bad_depth,
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
        lora_depth: Share of the decoder layers, from the top, the adapter is put on (1:
            all). Below the lowest adapted layer nothing is trained, so a step costs about half
            at 0.5, and the default spends the time saved on more passes (:attr:`epochs`): on
            128 oracle solutions (96 at level 1, 32 at level 2), the top half at twice the
            steps learnt level 2 better than every layer in the same time (calc 23 of 24 tasks
            against 17, grid 16 against 10); at equal steps it learns less (calc 8 against 17).
        max_examples: Most successes trained on (the newest are kept).
        length_exponent: How batches share out over episode lengths: each length in
            proportion to its number of successes raised to this power, in ``[0, 1]`` (1: as
            verified; 0.5, the default, draws a rarer, longer length more often, so a new
            level's few successes are not drowned by the level below; see
            :func:`~ratchet.engine.models.training.balanced_weights`).
        epochs: Passes over the successes a proposal trains for: it takes
            ``ceil(epochs * successes / batch_size)`` steps when that is more than ``steps``
            (the least it takes), up to ``max_steps``; 0 trains exactly ``steps``. A fixed
            step count falls behind as the successes pile up: 30 steps of four sequences saw
            each of calc's 128 oracle solutions (96 at level 1, 32 at level 2) once at most
            and taught level 2 on 2 of 24 tasks, 90 steps on 16 of 24. In a whole calc run
            (dev seed 0) that found 37 level-2 successes, 3 passes on every layer took level 2
            from 0 to 6 of 12 test tasks; 6 passes on half the layers cost the same time.
        max_steps: Most optimiser steps a proposal takes, however many successes there are
            (a step reads ``batch_size`` whole episodes, so its cost grows with the env's
            prompts).
    """

    steps: int = 30
    batch_size: int = 4
    learning_rate: float = 1e-3
    lora_rank: int = 16
    lora_depth: float = 0.5
    max_examples: int = 512
    length_exponent: float = 0.5
    epochs: float = 6.0
    max_steps: int = 240
    name: str = "rft"

    def __post_init__(self) -> None:
        """Refuse a length exponent outside ``[0, 1]``, negative epochs, no steps, no layers.

        Raises:
            ValueError: Naming the lever option and its range.
        """
        if not 0.0 <= self.length_exponent <= 1.0:
            raise ValueError(
                f"rft.length_exponent is from 0 (every length drawn equally) to 1 (as "
                f"verified), not {self.length_exponent}"
            )
        if self.epochs < 0:
            raise ValueError(f"rft.epochs counts passes over the successes, not {self.epochs}")
        if self.max_steps < 1:
            raise ValueError(f"rft.max_steps is at least 1, not {self.max_steps}")
        refuse_bad_depth(self)

    def steps_for(self, successes: int) -> int:
        """Optimiser steps for a proposal on ``successes`` episodes (see :attr:`epochs`)."""
        passes = math.ceil(self.epochs * successes / self.batch_size)
        return max(self.steps, min(self.max_steps, passes))

    def propose(self, context: LeverContext) -> Agent | None:
        """Train an adapter and return the candidate, or ``None`` without usable successes.

        Raises:
            ValueError: If the incumbent's weights cannot be trained (no trainer).
        """
        trainer = trainer_of(context, self.name)
        lessons = self.successes(context.experience, context.env.name)
        successes = as_prompted(lessons, context.incumbent)
        settings = replace(
            lora_settings(self, context.seed, length_exponent=self.length_exponent),
            steps=self.steps_for(len(successes)),
        )
        result = trainer.sft(successes, context.workdir / ADAPTER_DIR, settings, context.progress)
        return adapter_candidate(context, self.name, result)

    def successes(self, experience: Sequence[Trajectory], env: str) -> list[Trajectory]:
        """The episodes a proposal trains on: ``env``'s lessons, the newest ``max_examples``."""
        return newest_lessons(experience, env, self.max_examples)


def newest_lessons(experience: Sequence[Trajectory], env: str, limit: int) -> list[Trajectory]:
    """``env``'s verified successes to learn from (see :func:`lessons`), the newest ``limit``."""
    return [t for t in lessons(experience) if t.task.env == env][-limit:]
