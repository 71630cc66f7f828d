"""Learning from failures too: DPO and GRPO training of LoRA adapters for ``local`` models.

Both continue the incumbent's adapter (or a fresh one, which starts as the identity) and hold
the policy to its starting point, the *reference*: the incumbent, whose episodes the data came
from. The reference's log-probabilities are computed once before the first step, so no second
model is kept in memory.

- :func:`train_dpo`: a :class:`~ratchet.engine.models.base.Preference` pair is a prompt (the
  conversation up to a state) and two actions taken there; the loss is DPO's
  ``-log sigmoid(beta * ((chosen - ref chosen) - (rejected - ref rejected)))`` over the actions'
  summed token log-probabilities, plus ``chosen_nll_weight`` times the chosen action's mean
  token negative log-likelihood (RPO's SFT term; 0 leaves plain DPO), plus ``anchor_weight``
  times the mean token negative log-likelihood of the good actions of verified episodes given
  beside the pairs (anchors), as many a step as pairs: it holds the actions at the states no
  pair covers.
- :func:`train_grpo`: each episode's assistant tokens (failed actions included) are reinforced
  by its advantage with GRPO's clipped surrogate ``min(r A, clip(r, 1 - c, 1 + c) A)`` per token,
  ``r`` the policy-to-reference probability ratio, plus ``beta`` times the k3 estimate of the
  KL divergence to the reference, averaged over each episode's tokens and then over the batch.

Log-probabilities are computed from the hidden states of the action tokens alone (the language
model head runs on those rows, not on every position of the batch), which keeps a step's memory
at the size of the SFT step's.

Why not TRL's ``DPOTrainer``: on the same 32 pairs (about 220 tokens a sequence), batch of 4
pairs, fresh rank-16 LoRA and precomputed reference, a TRL 1.16 ``DPOTrainer`` step took 1.9
times as long as this loop's (median 46.6 s against 24.7 s on 2 shared, busy cores with one
thread, alternating runs; ``bench/preference_training.py``), its reference pass took minutes,
and it re-tokenises text pairs itself (no pre-tokenised input), so what it trains on could
differ from what the local backend prompts with at a token boundary. GRPO is trained offline
from the stored groups because TRL's ``GRPOTrainer`` samples its own completions and does not
recognise SmolLM2's chat template for tool calls.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from rich.progress import Progress

from ratchet.core.trajectory import Trajectory
from ratchet.engine.models.base import LoraSettings, Preference, Prompt, Scored
from ratchet.engine.models.lora import Example, lora_model, optimise, to_example
from ratchet.engine.models.render import Render, render_prompt

Sequence_ = tuple[list[int], list[int]]
"""``(input_ids, action_mask)``: one tokenised sequence, 1 on the tokens whose log-prob counts."""


@dataclass(frozen=True)
class PairExample:
    """One tokenised preference pair.

    Attributes:
        prompt_ids: The rendered conversation up to the state, ending with the assistant turn's
            opening.
        chosen_ids: The preferred action's tokens (its closing token included).
        rejected_ids: The other action's tokens.
    """

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]

    def sequences(self) -> tuple[Sequence_, Sequence_]:
        """The chosen and the rejected sequence, each masked to its action."""
        prompt = [0] * len(self.prompt_ids)
        return (
            (self.prompt_ids + self.chosen_ids, prompt + [1] * len(self.chosen_ids)),
            (self.prompt_ids + self.rejected_ids, prompt + [1] * len(self.rejected_ids)),
        )


@dataclass(frozen=True)
class ScoredExample:
    """One tokenised episode with the advantage of each of its action tokens.

    Attributes:
        input_ids: The whole rendered conversation.
        action_mask: 1 on every assistant token.
        advantages: How much to reinforce each masked token (negative: discourage), in order.
    """

    input_ids: list[int]
    action_mask: list[int]
    advantages: list[float]


def pair_example(
    tokenizer: Any, pair: Preference, max_tokens: int = 1024, render: Render = render_prompt
) -> PairExample | None:
    """Tokenise a pair as ``render`` prompts the model (default: as the local backend does).

    Returns ``None`` if an action does not render as a continuation of the prompt, both actions
    render alike, or the longer sequence exceeds ``max_tokens``.
    """
    prompt = render(tokenizer, Prompt(pair.messages, pair.tools), True)

    def action(message: dict[str, Any]) -> list[int] | None:
        full = render(tokenizer, Prompt((*pair.messages, message), pair.tools), False)
        if not full.startswith(prompt):
            return None
        ids: list[int] = tokenizer(full[len(prompt) :].rstrip("\n"), add_special_tokens=False)[
            "input_ids"
        ]
        return ids

    prompt_ids: list[int] = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    chosen, rejected = action(pair.chosen), action(pair.rejected)
    if not chosen or not rejected or chosen == rejected:
        return None
    if len(prompt_ids) + max(len(chosen), len(rejected)) > max_tokens:
        return None
    return PairExample(prompt_ids, chosen, rejected)


def pair_or_anchor_example(
    tokenizer: Any,
    item: Preference | Trajectory,
    max_tokens: int = 1024,
    render: Render = render_prompt,
) -> PairExample | Example | None:
    """Tokenise a DPO data item: a pair (see :func:`pair_example`) or an anchor episode.

    An anchor, a verified episode, is tokenised as SFT trains it: its good actions masked in.
    """
    if isinstance(item, Trajectory):
        return to_example(tokenizer, item, max_tokens, render=render)
    return pair_example(tokenizer, item, max_tokens, render)


def scored_example(
    tokenizer: Any, scored: Scored, max_tokens: int = 1024, render: Render = render_prompt
) -> ScoredExample | None:
    """Tokenise an episode with every assistant turn in the mask (failed ones too).

    Each turn's tokens take its entry of ``turn_advantages`` (the turns are the mask's runs of
    ones, in order), or ``advantage`` where there is none.
    """
    example = to_example(tokenizer, scored.trajectory, max_tokens, failed=True, render=render)
    if example is None:
        return None
    per_turn = scored.turn_advantages or ()
    advantages: list[float] = []
    turn, inside = -1, False
    for bit in example.assistant_masks:
        if bit and not inside:
            turn += 1
        inside = bool(bit)
        if bit:
            advantages.append(per_turn[turn] if turn < len(per_turn) else scored.advantage)
    return ScoredExample(example.input_ids, example.assistant_masks, advantages)


def token_logps(model: Any, batch: Sequence[Sequence_], pad_id: int = 0) -> list[Any]:
    """Each sequence's log-probabilities of its masked tokens (a 1-D tensor per sequence).

    The model's trunk runs on the right-padded batch; its head only on the positions that
    predict a masked token.
    """
    import torch

    width = max(len(ids) for ids, _ in batch)
    device = model.device
    ids = torch.tensor([list(i) + [pad_id] * (width - len(i)) for i, _ in batch], device=device)
    attention = torch.tensor(
        [[1] * len(i) + [0] * (width - len(i)) for i, _ in batch], device=device
    )
    mask = torch.tensor([list(m) + [0] * (width - len(m)) for _, m in batch], device=device).bool()
    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = causal.get_decoder()(input_ids=ids, attention_mask=attention).last_hidden_state
    targets = mask[:, 1:]
    logits = causal.get_output_embeddings()(hidden[:, :-1][targets]).float()
    picked = torch.log_softmax(logits, dim=-1).gather(1, ids[:, 1:][targets].unsqueeze(1))
    counts = targets.sum(dim=1).tolist()
    return list(torch.split(picked.squeeze(1), counts))


def reference_logps(
    model: Any,
    sides: Sequence[Sequence[Sequence_]],
    batch_size: int,
    progress: Progress | None = None,
) -> list[list[Any]]:
    """Token log-probabilities of every sequence under ``model`` as it is now (no gradients).

    This pass over every pair or episode comes before the first training step and takes
    minutes on a loaded CPU, so it has its own bar, ``reference``, counting the sequences read.

    Args:
        model: The policy at its start, the reference.
        sides: Lists of sequences (DPO's chosen and rejected sides, GRPO's one list), each read
            in batches of its own.
        batch_size: Sequences read at once.
        progress: Progress display to add the ``reference`` bar to, or ``None``.

    Returns:
        For each side, a 1-D tensor per sequence (see :func:`token_logps`).
    """
    import torch

    total = sum(len(side) for side in sides)
    bar = None if progress is None else progress.add_task("reference", total=total)
    model.eval()
    found: list[list[Any]] = []
    with torch.no_grad():
        for side in sides:
            logps: list[Any] = []
            for start in range(0, len(side), batch_size):
                batch = side[start : start + batch_size]
                logps.extend(token_logps(model, batch))
                if progress is not None and bar is not None:
                    progress.advance(bar, len(batch))
            found.append(logps)
    model.train()
    return found


Loss = Callable[[int], Any]
"""``loss(step)``: the step's loss tensor, or parts that sum to it (see ``optimise``)."""

D = TypeVar("D")
E = TypeVar("E")


@dataclass(frozen=True)
class Objective(Generic[D, E]):
    """A loss that continues an adapter and holds it to its start, the reference: DPO or GRPO.

    Attributes:
        label: The progress bar's label.
        tokenize: ``tokenize(tokenizer, item, max_tokens, render)``: one data item tokenised as
            ``render`` prompts the model, or ``None`` where it does not fit.
        loss: ``loss(examples, settings, trainable, rng, progress)``: a function from the step
            number to that step's loss, built once per run (the reference's log-probabilities
            are computed then, with their own bar on ``progress``; see
            :func:`reference_logps`).
        usable: Whether tokenised items leave something to train on (default: any at all);
            DPO's anchors alone do not.
        micro_batches: ``micro_batches(examples, settings)``: the parts a step's loss comes in,
            for the progress bar (default: ``settings.batch_size``, an item at a time).
    """

    label: str
    tokenize: Callable[[Any, D, int, Render], E | None]
    loss: Callable[[Sequence[E], LoraSettings, Any, random.Random, Progress | None], Loss]
    usable: Callable[[Sequence[E]], bool] = bool
    micro_batches: Callable[[Sequence[E], LoraSettings], int] = lambda _, s: s.batch_size

    def train(
        self,
        model: Any,
        examples: Sequence[E],
        out: Path,
        settings: LoraSettings,
        start: Path | None = None,
        progress: Progress | None = None,
    ) -> list[float]:
        """Train an adapter on ``examples`` with this loss, save it to ``out``, return the losses.

        Args:
            model: The base model (its weights stay frozen).
            examples: Tokenised items (see :attr:`tokenize`).
            out: Where the adapter is saved.
            settings: Steps, batch size (items per step), learning rate, ``beta`` (and GRPO's
                ``clip``).
            start: The adapter to continue (the reference); ``None`` for a fresh one.
            progress: Progress display, or ``None``.
        """
        trainable = lora_model(model, settings, start)
        loss = self.loss(examples, settings, trainable, random.Random(settings.seed), progress)
        parts = self.micro_batches(examples, settings)
        losses = optimise(trainable, loss, settings, progress, self.label, parts)
        trainable.save_pretrained(str(out))
        return losses


def _dpo_loss(
    examples: Sequence[PairExample | Example],
    settings: LoraSettings,
    trainable: Any,
    rng: random.Random,
    progress: Progress | None,
) -> Loss:
    import torch

    pairs = [e for e in examples if isinstance(e, PairExample)]
    weighted = [e for e in examples if isinstance(e, Example)] if settings.anchor_weight else []
    anchors = [(e.input_ids, e.assistant_masks) for e in weighted]
    chosen = [e.sequences()[0] for e in pairs]
    rejected = [e.sequences()[1] for e in pairs]
    reference = [
        torch.stack([logps.sum() for logps in side])
        for side in reference_logps(trainable, (chosen, rejected), settings.batch_size, progress)
    ]

    def loss(step: int) -> Iterator[Any]:
        picked = rng.choices(range(len(pairs)), k=settings.batch_size)
        for i in picked:  # a pair at a time: only one pair's activations are alive
            good, bad = (logps.sum() for logps in token_logps(trainable, [chosen[i], rejected[i]]))
            margin = (good - reference[0][i]) - (bad - reference[1][i])
            nll = -good / len(pairs[i].chosen_ids)
            dpo = -torch.nn.functional.logsigmoid(settings.beta * margin)
            yield (dpo + settings.chosen_nll_weight * nll) / len(picked)
        if anchors:
            for i in rng.choices(range(len(anchors)), k=settings.batch_size):
                [logps] = token_logps(trainable, [anchors[i]])
                yield -settings.anchor_weight * logps.mean() / settings.batch_size

    return loss


def _has_pair(examples: Sequence[PairExample | Example]) -> bool:
    return any(isinstance(e, PairExample) for e in examples)


def _dpo_micro_batches(examples: Sequence[PairExample | Example], settings: LoraSettings) -> int:
    """A step's pairs, then as many anchors where there are any (see ``_dpo_loss``)."""
    anchored = settings.anchor_weight and any(isinstance(e, Example) for e in examples)
    return settings.batch_size * (2 if anchored else 1)


def _grpo_loss(
    examples: Sequence[ScoredExample],
    settings: LoraSettings,
    trainable: Any,
    rng: random.Random,
    progress: Progress | None,
) -> Loss:
    import torch

    sequences = [(e.input_ids, e.action_mask) for e in examples]
    [reference] = reference_logps(trainable, (sequences,), settings.batch_size, progress)

    def loss(step: int) -> Iterator[Any]:
        picked = rng.choices(range(len(examples)), k=settings.batch_size)
        for i in picked:  # an episode at a time: only one episode's activations are alive
            [logps] = token_logps(trainable, [sequences[i]])
            advantage = torch.tensor(examples[i].advantages, dtype=logps.dtype)
            old = reference[i]
            ratio = torch.exp(logps - old)
            clipped = torch.clamp(ratio, 1 - settings.clip, 1 + settings.clip)
            surrogate = torch.minimum(ratio * advantage, clipped * advantage)
            kl = torch.exp(old - logps) - (old - logps) - 1
            yield (settings.beta * kl - surrogate).mean() / len(picked)

    return loss


DPO: Objective[Preference | Trajectory, PairExample | Example] = Objective(
    "training (dpo)", pair_or_anchor_example, _dpo_loss, _has_pair, _dpo_micro_batches
)
"""DPO on preference pairs, with verified episodes as anchors (see the module)."""

GRPO: Objective[Scored, ScoredExample] = Objective("training (grpo)", scored_example, _grpo_loss)
"""GRPO's clipped objective on episodes with their advantages (see the module)."""

train_dpo = DPO.train
"""Train an adapter on tokenised pairs with the DPO loss (``settings.batch_size`` pairs a step)."""

train_grpo = GRPO.train
"""Train an adapter on tokenised episodes with GRPO's clipped objective and KL penalty."""
