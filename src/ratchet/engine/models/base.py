"""The seams to models: :class:`Model` completes conversations, :class:`Trainer` trains adapters."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rich.progress import Progress

from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory


class ModelError(RuntimeError):
    """A backend could not be reached or set up (unreachable server, missing model file)."""


@dataclass(frozen=True)
class Prompt:
    """One conversation to continue.

    Attributes:
        messages: OpenAI chat-format messages (system, user, assistant, tool).
        tools: OpenAI-format tool schemas on offer; the reply should call one of them.
        key: The conversation this prompt continues (e.g. an episode), if known: a backend
            with several servers keeps a conversation on one, where its prefix is cached.
        temperature: This conversation's own sampling temperature, overriding the batch's
            :attr:`Sampling.temperature` (so one batch can mix temperatures); ``None``: the
            batch's.
        reply_tools: The tool schemas the reply must be a call of, narrowed and restricted by
            whoever built the prompt (an explorer: one drawn tool, arguments copied from the
            conversation); ``None``: any of ``tools``. A backend that constrains decoding
            enforces it and still shows the model ``tools``, so the prompt reads the same as
            without it; one that cannot constrain offers only these tools.
        seed: This reply's own sampling seed, overriding the batch's (``Sampling.seed`` plus
            the prompt's position), so the reply samples alike in whatever batch it lands;
            ``None``: the batch's.
    """

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    key: str | None = None
    temperature: float | None = None
    reply_tools: tuple[dict[str, Any], ...] | None = None
    seed: int | None = None


def tool_name(tool: dict[str, Any]) -> str:
    """The name of an OpenAI-format tool schema (``""`` if it has none)."""
    function = tool.get("function", tool)
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else ""


def offered_tools(prompt: Prompt) -> tuple[dict[str, Any], ...]:
    """The tools ``prompt``'s reply may call: its ``reply_tools`` if set, else its ``tools``."""
    return prompt.tools if prompt.reply_tools is None else prompt.reply_tools


def estimate_tokens(prompt: Prompt) -> int:
    """Return an over-estimate of a prompt's tokens when the tokenizer is unknown.

    Counts the characters of the messages and tool schemas as JSON at three per token:
    tokenizers of current models average about four characters a token on English text and
    code, so this usually errs towards cutting a prompt early (text dense in digits or in
    non-Latin scripts can take more tokens than estimated).
    """
    return -(-len(json.dumps([prompt.messages, prompt.tools], ensure_ascii=False)) // 3)


@dataclass(frozen=True)
class Sampling:
    """How to sample a reply.

    The last three fields are optional features (as in vLLM's ``SamplingParams``): a backend
    lists those it honours in its ``sampling_options`` attribute (a frozenset of field names;
    none if it has no such attribute), and a caller leaves the others at their defaults.

    Attributes:
        temperature: 0 means greedy.
        max_tokens: Cap on generated tokens per reply.
        seed: Base seed for reproducible sampling where the backend supports it: prompt
            ``i`` of a batch samples with ``seed + i`` unless it carries its own
            :attr:`Prompt.seed`.
        top_p: Nucleus sampling: draw among the likeliest tokens whose probabilities add up
            to this much (1: all).
        top_logprobs: Report this many likeliest alternatives beside each generated token's
            log-probability.
        reply_schema: A JSON schema that a reply calling no tool must match (the backend
            constrains decoding to it); ``None``: free text.
    """

    temperature: float = 0.7
    max_tokens: int = 256
    seed: int | None = None
    top_p: float = 1.0
    top_logprobs: int = 0
    reply_schema: dict[str, Any] | None = None


def row_seeds(prompts: Sequence[Prompt], sampling: Sampling) -> list[int | None]:
    """The sampling seed of each prompt of a batch: its own, else ``sampling.seed`` + position."""
    seeds: list[int | None] = []
    for index, prompt in enumerate(prompts):
        shared = None if sampling.seed is None else sampling.seed + index
        seeds.append(shared if prompt.seed is None else prompt.seed)
    return seeds


@dataclass(frozen=True)
class Completion:
    """One reply.

    Attributes:
        text: The assistant's raw text (for constrained local decoding, the JSON tool call).
        tool_calls: Tool calls the backend parsed natively (OpenAI ``tool_calls``), if any.
        prompt_tokens: Tokens read.
        completion_tokens: Tokens generated.
        latency_s: Seconds the backend spent on this reply (shared batch time for batches).
        error: Set when this one request failed (after retries); the text is then empty.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Model(Protocol):
    """A backend that completes a batch of conversations."""

    name: str

    def complete(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        """Return one completion per prompt, in order.

        A failure of one request is reported in that completion's ``error``; a backend that
        cannot work at all (unreachable, misconfigured) raises :class:`ModelError`.
        """
        ...


@runtime_checkable
class WindowedModel(Model, Protocol):
    """A backend that knows its context window and can count a prompt's tokens.

    The rollout scheduler then keeps every prompt inside the window with the declared context
    policy (:mod:`ratchet.engine.context`) instead of sending one the model cannot take.

    Attributes:
        context_window: Tokens the model attends to, prompt and reply together (``None``:
            unknown, prompts are sent whole).
    """

    context_window: int | None

    def count_tokens(self, prompt: Prompt) -> int:
        """Return how many tokens the model reads for ``prompt`` (an estimate is allowed)."""
        ...


@runtime_checkable
class BatchedModel(Model, Protocol):
    """A backend that is many times faster on a batch than prompt by prompt (a local model).

    The rollout scheduler gathers concurrent episodes' requests into batches for these.
    """

    max_batch_size: int


@dataclass(frozen=True)
class LoraSettings:
    """How a LoRA adapter is trained.

    Attributes:
        steps: Optimiser steps.
        batch_size: Sequences per step.
        learning_rate: AdamW learning rate.
        rank: LoRA rank (alpha is twice the rank).
        max_tokens: Longest training sequence; longer episodes are skipped. 3072 holds a
            multi-turn shop or files episode of the embedded model (its prompt alone is about
            2,000 tokens); 1024 skipped every one of them.
        seed: Seed for batching and initialisation.
        beta: How strongly :meth:`Trainer.dpo` and :meth:`Trainer.grpo` hold the policy to the
            reference (DPO's beta; the KL coefficient of GRPO); unused by SFT.
        clip: GRPO's clipping range: the policy-to-reference probability ratio of a token
            counts only within ``1 +- clip``; unused by SFT and DPO.
        length_exponent: How SFT batches share out over episode lengths (numbers of
            actions): each length in proportion to its count raised to this power (1: as
            verified; 0.5: a rare length more; see
            :func:`~ratchet.engine.models.training.balanced_weights`); unused by DPO and GRPO.
        chosen_nll_weight: Weight of an SFT term in :meth:`Trainer.dpo`: each pair's chosen
            action's mean token negative log-likelihood, added to its DPO loss (RPO; TRL's
            ``rpo_alpha``), so the margin grows by raising the chosen action, not only by
            sinking the rejected one; 0 is plain DPO. Unused by SFT and GRPO.
        anchor_weight: Weight of a second SFT term in :meth:`Trainer.dpo`: the mean token
            negative log-likelihood of the good actions of the verified episodes passed as
            ``anchors``, so states no pair covers (where the incumbent already acts right)
            keep their actions while the pairs move others; 0 ignores the anchors. Unused
            by SFT and GRPO.
        depth: Share of the decoder layers, counted from the top, that a fresh adapter is
            put on (1.0: every layer; at least one layer). Nothing below the lowest adapted
            layer is trained, so a step's backward pass stops there.
    """

    steps: int = 30
    batch_size: int = 4
    learning_rate: float = 1e-3
    rank: int = 16
    max_tokens: int = 3072
    seed: int = 0
    beta: float = 0.1
    clip: float = 0.2
    length_exponent: float = 1.0
    chosen_nll_weight: float = 0.0
    anchor_weight: float = 0.0
    depth: float = 1.0


@dataclass(frozen=True)
class TrainResult:
    """What a training run did.

    Attributes:
        examples: Sequences trained on.
        losses: Loss at each step.
    """

    examples: int
    losses: tuple[float, ...]


@dataclass(frozen=True)
class Preference:
    """Two actions taken at the same state, one better than the other (a DPO pair).

    Attributes:
        messages: The conversation up to the state, in OpenAI chat format (system first).
        tools: The OpenAI-format tool schemas on offer.
        chosen: The assistant message of the preferred action (it led to a success).
        rejected: The assistant message of the other action (it led to a failure).
        task_id: The task both came from, for provenance.
        turn: The assistant turn (0-based) at which the two episodes parted.
    """

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    chosen: dict[str, Any]
    rejected: dict[str, Any]
    task_id: str = ""
    turn: int = 0


@dataclass(frozen=True)
class Scored:
    """An episode with the advantage its actions are reinforced by (GRPO's unit of data).

    Attributes:
        trajectory: The episode; every assistant turn in it, failed ones included, is trained.
        advantage: Positive to make its actions likelier, negative to make them rarer.
        turn_advantages: One advantage per assistant turn, in order, in place of
            ``advantage`` (step-level credit: the action at a state that siblings sharing the
            state acted otherwise at); ``None``: ``advantage`` for every turn.
    """

    trajectory: Trajectory
    advantage: float
    turn_advantages: tuple[float, ...] | None = None


@runtime_checkable
class Trainer(Protocol):
    """Trains LoRA adapters for one model: the only way a lever reaches weights.

    Every method renders its data exactly as the model is prompted, saves a peft adapter
    directory to ``out`` and returns ``None`` when nothing is left to train on (all too long,
    none with an assistant turn). ``sft`` trains a fresh adapter on the base weights. ``dpo``
    and ``grpo`` continue the adapter at ``start`` (the incumbent's; ``None`` means a fresh
    adapter on the base weights) and hold the policy to that starting point, the reference,
    with ``settings.beta`` (and ``settings.clip``).
    """

    def sft(
        self,
        episodes: Sequence[Trajectory],
        out: Path,
        settings: LoraSettings,
        progress: Progress | None = None,
    ) -> TrainResult | None:
        """Fine-tune an adapter on the good assistant turns of ``episodes`` and save it to ``out``.

        Returns ``None`` when no episode leaves anything to train on.
        """
        ...

    def dpo(
        self,
        pairs: Sequence[Preference],
        out: Path,
        settings: LoraSettings,
        start: Path | None = None,
        progress: Progress | None = None,
        anchors: Sequence[Trajectory] = (),
    ) -> TrainResult | None:
        """Train on preference pairs with the DPO loss, the policy at ``start`` the reference.

        The loss of a pair is ``-log sigmoid(beta * (chosen margin - rejected margin))``, a
        margin being an action's log-probability under the policy minus under the reference,
        plus ``chosen_nll_weight`` times the chosen action's mean token negative log-likelihood.
        Each step adds ``anchor_weight`` times the mean token negative log-likelihood of the
        good actions of as many ``anchors`` (verified episodes) as it has pairs. Returns
        ``None`` when no pair fits, whatever the anchors.
        """
        ...

    def grpo(
        self,
        episodes: Sequence[Scored],
        out: Path,
        settings: LoraSettings,
        start: Path | None = None,
        progress: Progress | None = None,
    ) -> TrainResult | None:
        """Reinforce each episode's actions by its advantage (GRPO's clipped objective).

        Per action token: ``-min(r A, clip(r, 1 - clip, 1 + clip) A) + beta * KL``, where ``r``
        is the policy-to-reference probability ratio and the reference, the policy at
        ``start``, stands for the one that played the episodes.
        """
        ...
