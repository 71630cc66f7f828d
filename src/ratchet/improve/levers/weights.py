"""What the weight levers (``rft``, ``pairs``, ``grpo``, ``demos``) share.

Each trains a LoRA adapter through the context's :class:`~ratchet.engine.models.base.Trainer`
into ``adapter/`` of the candidate's directory and records what it trained on in the
candidate's notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypedDict, Unpack

from ratchet.core.agent import Agent
from ratchet.core.memory import ExemplarIndex, demonstration
from ratchet.core.trajectory import Trajectory
from ratchet.engine.models.base import LoraSettings, Trainer, TrainResult
from ratchet.improve.levers.base import LeverContext, NoCandidate

ADAPTER_DIR = "adapter"


class WeightLever(Protocol):
    """The training settings every weight lever has."""

    @property
    def steps(self) -> int:
        """Optimiser steps per proposal."""
        ...

    @property
    def batch_size(self) -> int:
        """Sequences (or pairs) per step."""
        ...

    @property
    def learning_rate(self) -> float:
        """AdamW learning rate."""
        ...

    @property
    def lora_rank(self) -> int:
        """Rank of a fresh adapter."""
        ...

    @property
    def lora_depth(self) -> float:
        """Share of the decoder layers, from the top, a fresh adapter is put on."""
        ...

    @property
    def name(self) -> str:
        """The lever's name, as its options are given."""
        ...


def refuse_bad_depth(lever: WeightLever) -> None:
    """Refuse a ``lora_depth`` outside ``(0, 1]``.

    Raises:
        ValueError: Naming the lever option and its range.
    """
    if not 0.0 < lever.lora_depth <= 1.0:
        raise ValueError(
            f"{lever.name}.lora_depth is the share of the layers an adapter is put on, from the "
            f"top: above 0 and at most 1, not {lever.lora_depth}"
        )


class LossKnobs(TypedDict, total=False):
    """The knobs of a weight lever's loss, by their :class:`LoraSettings` names."""

    beta: float
    clip: float
    length_exponent: float
    chosen_nll_weight: float
    anchor_weight: float


def lora_settings(lever: WeightLever, seed: int, **knobs: Unpack[LossKnobs]) -> LoraSettings:
    """``lever``'s training settings.

    Args:
        lever: Its steps, batch size, learning rate, LoRA rank and depth are used.
        seed: Seeds batching and initialisation (a run's: its context's).
        **knobs: The lever's own knobs of its loss (see :class:`LossKnobs`); the others
            keep their defaults.
    """
    settings = LoraSettings(
        lever.steps,
        lever.batch_size,
        lever.learning_rate,
        lever.lora_rank,
        seed=seed,
        depth=lever.lora_depth,
    )
    return replace(settings, **knobs)


def trainer_of(context: LeverContext, lever: str) -> Trainer:
    """The context's trainer.

    Raises:
        ValueError: If the incumbent's weights cannot be trained (no trainer).
    """
    if context.trainer is None:
        raise ValueError(
            f"the {lever} lever cannot train {context.incumbent.model!r}: use --model local, "
            "or for a served model pass --weights PATH (its Hugging Face weights)"
        )
    return context.trainer


def incumbent_adapter(context: LeverContext) -> Path | None:
    """The incumbent's adapter directory, where ``pairs`` and ``grpo`` start from, if any."""
    return context.incumbent.adapter_path(context.incumbent_dir)


def played(context: LeverContext, trajectory: Trajectory) -> bool:
    """Whether ``trajectory`` is a real episode in this env (not a hindsight replay)."""
    return (
        trajectory.task.env == context.env.name
        and trajectory.verdict is not None
        and trajectory.error is None
        and not trajectory.metadata.get("hindsight")
    )


def as_prompted(episodes: Sequence[Trajectory], agent: Agent) -> list[Trajectory]:
    """``episodes`` as ``agent`` is prompted: with the demonstrations it would be shown.

    An adapter trained on bare conversations and then run with exemplars in its prompt sees
    text it never learned from (an rft adapter with exemplars added passed 0 of 24 probe tasks
    where it alone passed 24). Each episode gets, after its system message, the demonstrations
    ``agent``'s exemplars give its task (as the rollout selects them, its own problem never
    among them), marked ``"demonstration": True`` so that training reads them as context, never
    as targets. Without exemplars the episodes are returned as they are.
    """
    if not agent.exemplars:
        return list(episodes)
    index = ExemplarIndex(agent.exemplars)
    shown = []
    for episode in episodes:
        chosen = index.select(episode.task, agent.exemplars_per_task, agent.exemplar_token_budget)
        turns = [
            {**turn, "demonstration": True}
            for exemplar in chosen
            for turn in demonstration(exemplar)
        ]
        if turns:
            episode = replace(
                episode, messages=(episode.messages[0], *turns, *episode.messages[1:])
            )
        shown.append(episode)
    return shown


def adapter_candidate(
    context: LeverContext, lever: str, result: TrainResult | None, **notes: Any
) -> Agent | None:
    """The incumbent with the adapter just trained, its training recorded in the notes.

    Raises:
        NoCandidate: When the trainer had nothing to train on (``result`` is ``None``).
    """
    if result is None:
        raise NoCandidate("nothing to train on (no verified example that fits the context)")
    return context.incumbent.derive(
        context.version,
        lever,
        adapter=ADAPTER_DIR,
        notes={
            "trained_on": result.examples,
            "steps": len(result.losses),
            "losses": list(result.losses),
            **notes,
        },
    )
