"""Training LoRA adapters for ``local`` models: the :class:`~ratchet.engine.models.base.Trainer`.

Each episode is rendered exactly as the ``local`` backend prompts the model and tokenised; the
loss is computed on the assistant turns only, and not on a turn whose action failed (labels
are -100 elsewhere, the convention transformers' loss and TRL's ``assistant_masks`` follow).
SFT trains on an episode's recorded token ids instead, when every turn it learns carries them
for this model (recorded traffic of ``ratchet serve``, see :func:`.lora.traced_examples`).
Every SFT call trains a fresh peft LoRA adapter from the base weights, as in expert iteration,
so adapters never compound drift; DPO and GRPO (:mod:`ratchet.engine.models.preference`) continue
the incumbent's adapter instead, since their losses are defined relative to it.

The optimisation loop is the plain masked-LM loop rather than TRL's ``SFTTrainer``: on CPU the
trainer's per-token entropy and accuracy logging over the whole vocabulary tripled the step
time (measured here: about 15 s against 5 s per step of 4 sequences of 350 tokens).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.progress import Progress

from ratchet.core.trajectory import Trajectory
from ratchet.engine.models.base import LoraSettings, Preference, Scored, TrainResult
from ratchet.engine.models.lora import (
    Example,
    lora_model,
    optimise,
    to_example,
    traced_examples,
)
from ratchet.engine.models.preference import DPO, GRPO, Objective, Sequence_, token_logps
from ratchet.engine.models.render import Render, render_prompt

__all__ = [
    "Example",
    "LocalTrainer",
    "balanced_weights",
    "shared_prefix",
    "summed_logp_parts",
    "to_example",
    "train_lora",
]

SHARED_MIN = 64
"""The shortest prefix shared by a batch's sequences that training reads once for all."""


class LocalTrainer:
    """Trains adapters for a ``local`` model (the embedded one, or one at ``path``).

    The weights are loaded afresh for each training run and released after it, so training
    never disturbs a model that is serving episodes. Training runs on a GPU when torch sees
    one, else on the CPU.

    Args:
        path: A Hugging Face model directory or GGUF file; ``None`` for the embedded model.
        render: How the model is prompted where the adapter will be used (default: as the
            ``local`` backend prompts it).
    """

    def __init__(self, path: str | None = None, render: Render = render_prompt) -> None:
        self.path = path
        self.render = render
        self.name = "local" if path is None else f"local:{path}"

    def sft(
        self,
        episodes: Sequence[Trajectory],
        out: Path,
        settings: LoraSettings,
        progress: Progress | None = None,
    ) -> TrainResult | None:
        """Fine-tune an adapter on the good assistant turns of ``episodes``; save it to ``out``."""

        def train(model: Any, examples: Any, tokenizer: Any) -> list[float]:
            return train_lora(model, tokenizer, examples, out, settings, progress)

        def tokenize(tokenizer: Any, episode: Trajectory, max_tokens: int) -> list[Example]:
            # Recorded ids are of the local backend's own prompts: only they match its rendering.
            if self.render is render_prompt:
                traced = traced_examples(episode, self.name, max_tokens)
                if traced is not None:
                    return traced
            example = to_example(tokenizer, episode, max_tokens, render=self.render)
            return [example] if example else []

        return self._train(tokenize, train, episodes, settings, progress)

    def dpo(
        self,
        pairs: Sequence[Preference],
        out: Path,
        settings: LoraSettings,
        start: Path | None = None,
        progress: Progress | None = None,
        anchors: Sequence[Trajectory] = (),
    ) -> TrainResult | None:
        """Train on preference pairs with the DPO loss (see :data:`.policy.DPO`)."""
        return self._continue(DPO, [*pairs, *anchors], out, settings, start, progress)

    def grpo(
        self,
        episodes: Sequence[Scored],
        out: Path,
        settings: LoraSettings,
        start: Path | None = None,
        progress: Progress | None = None,
    ) -> TrainResult | None:
        """Reinforce episodes by their advantages (see :data:`.policy.GRPO`)."""
        return self._continue(GRPO, episodes, out, settings, start, progress)

    def _continue(
        self,
        objective: Objective[Any, Any],
        data: Sequence[Any],
        out: Path,
        settings: LoraSettings,
        start: Path | None,
        progress: Progress | None,
    ) -> TrainResult | None:
        """Continue the adapter at ``start`` on ``data`` with ``objective``; save it to ``out``."""

        def train(model: Any, examples: Any, tokenizer: Any) -> list[float]:
            return objective.train(model, examples, out, settings, start, progress)

        def tokenize(tokenizer: Any, item: Any, max_tokens: int) -> list[Any]:
            example = objective.tokenize(tokenizer, item, max_tokens, self.render)
            return [example] if example else []

        return self._train(tokenize, train, data, settings, progress, objective.usable)

    def _train(
        self,
        tokenize: Callable[[Any, Any, int], Sequence[Any]],
        train: Callable[[Any, Any, Any], list[float]],
        data: Sequence[Any],
        settings: LoraSettings,
        progress: Progress | None,
        usable: Callable[[list[Any]], bool] = bool,
    ) -> TrainResult | None:
        """Load the model, tokenise ``data`` (dropping what does not fit) and ``train`` on it.

        ``tokenize`` turns an item into its examples (none when it does not fit). Returns
        ``None`` when what fits is not ``usable`` (default: when nothing fits).

        Loading and tokenising come before the first training step and take minutes on a
        loaded CPU, so they have their own bar on ``progress``: ``preparing (loading the
        model)``, then ``preparing (tokenising)`` counting the items of ``data``.
        """
        bar = None
        if progress is not None:
            bar = progress.add_task("preparing (loading the model)", total=len(data))
        import torch

        from ratchet.engine.models.checkpoints import load

        model, tokenizer = load(self.path)
        if progress is not None and bar is not None:
            progress.update(bar, description="preparing (tokenising)")
        examples: list[Any] = []
        for item in data:
            examples.extend(tokenize(tokenizer, item, settings.max_tokens))
            if progress is not None and bar is not None:
                progress.advance(bar)
        if not usable(examples):
            return None
        if torch.cuda.is_available():
            model = model.to("cuda")
        return TrainResult(len(examples), tuple(train(model, examples, tokenizer)))


def balanced_weights(patterns: Sequence[str], length_exponent: float = 1.0) -> list[float]:
    """Sampling weights for training examples with these action patterns (comma-joined tools).

    Successes found by exploration mirror the model's own habits (a small model calls its
    favourite tool most), and uniform batches would teach the habit back; so the patterns of
    one length (number of actions) share that length's weight equally, which teaches every
    verified way of solving. Each length's weight is its number of examples raised to
    ``length_exponent``: at 1 each length keeps its share of the successes; below 1 a rare
    length is drawn more often than it was verified (at 0.5 in proportion to the square root
    of its count), as temperature sampling evens out languages in multilingual training. Even
    shares (0) are risky with few long successes: they made a calc run's 8 two-operation
    successes (3 patterns) 3/7 of every batch against its 181 one-operation ones (4 patterns),
    and the adapter learned to call a second tool on one-operation tasks.

    Args:
        patterns: Each example's action pattern.
        length_exponent: Power of each length's count that sets its share, in ``[0, 1]``.

    Returns:
        One weight per pattern; they sum to the number of patterns.
    """
    counts = Counter(patterns)
    length = {pattern: pattern.count(",") for pattern in counts}
    examples_of_length = Counter(length[p] for p in patterns)
    patterns_of_length = Counter(length.values())
    share = {n: count**length_exponent for n, count in examples_of_length.items()}
    scale = len(patterns) / sum(share.values())
    return [scale * share[length[p]] / patterns_of_length[length[p]] / counts[p] for p in patterns]


def train_lora(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    out: Path,
    settings: LoraSettings,
    progress: Progress | None = None,
) -> list[float]:
    """Fine-tune a LoRA adapter on ``examples``, save it to ``out`` and return the losses.

    Batches are drawn by :func:`balanced_weights`: every action pattern of one length equally
    likely, each length as often as ``settings.length_exponent`` says.
    """
    trainable = lora_model(model, settings)
    weights = balanced_weights([e.pattern for e in examples], settings.length_exponent)
    rng = random.Random(settings.seed)
    pad_id = int(tokenizer.pad_token_id or 0)

    def loss(step: int) -> Iterator[Any]:
        # One sequence at a time, unpadded, the head only where a reply token is predicted:
        # a padded batch of four 3,000-token episodes with full-vocabulary logits took over
        # 20 GB and the kernel killed the run. The parts sum to the batch's mean token loss.
        batch = rng.choices(examples, weights=weights, k=settings.batch_size)
        predicted = sum(sum(e.assistant_masks[1:]) for e in batch)
        sequences = [(e.input_ids, e.assistant_masks) for e in batch]
        yield from summed_logp_parts(trainable, sequences, -1.0 / predicted, pad_id)

    losses = optimise(trainable, loss, settings, progress, "training", settings.batch_size)
    trainable.save_pretrained(str(out))
    return losses


def shared_prefix(batch: Sequence[Sequence_]) -> int:
    """How many leading tokens every sequence of ``batch`` shares before its first masked one.

    The token at that length is masked in no sequence, so no prediction of a masked token
    needs the prefix's last hidden state.
    """
    shortest = min(min(len(ids), mask.index(1) if 1 in mask else len(mask)) for ids, mask in batch)
    first = batch[0][0]
    length = next(
        (i for i in range(shortest) if any(ids[i] != first[i] for ids, _ in batch)), shortest
    )
    return max(0, length - 1)


def summed_logp_parts(
    model: Any, batch: Sequence[Sequence_], scale: float, pad_id: int = 0
) -> Iterator[Any]:
    """Parts that sum to ``scale`` times the masked tokens' summed log-probabilities.

    Each part is meant to be backpropagated as it comes (see ``optimise``). The episodes of an
    env share a prefix: the system message and as much of the tool list as every world has in
    common (tools whose arguments are closed to a world's own values differ from world to
    world). When every sequence shares at least :data:`SHARED_MIN` tokens, that prefix is read
    once: each sequence reads on from a copy of its keys and values, which collect the
    gradient, and the last part carries that gradient back through the prefix, once.
    Measured on oracle episodes of the embedded model (``bench/prefix_training.py``, batches
    of four): calc x1.37 faster a step (60% of the tokens shared), shop x1.19 (35%), grid
    x1.72 (73%), files x0.98 (5%); gradients equal up to bf16 rounding (cosine above 0.9997).
    """
    import torch
    from transformers import DynamicCache

    length = shared_prefix(batch) if len(batch) > 1 else 0
    if length < SHARED_MIN:
        for ids, mask in batch:
            [logps] = token_logps(model, [(ids, mask)], pad_id)
            yield scale * logps.sum()
        return
    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, config = causal.get_decoder(), causal.config
    cache = DynamicCache(config=config)
    decoder(input_ids=torch.tensor([batch[0][0][:length]]), cache=cache, use_cache=True)
    layers: list[Any] = list(cache.layers)
    read: list[Any] = [tensor for layer in layers for tensor in (layer.keys, layer.values)]
    # Keys and values below the lowest trained layer depend on no trained weight.
    trained_from = _lowest_trained_layer(decoder)
    leaves = [t.detach().requires_grad_(i // 2 >= trained_from) for i, t in enumerate(read)]
    pairs = list(zip(leaves[::2], leaves[1::2], strict=True))
    for ids, mask in batch:
        own = DynamicCache(ddp_cache_data=pairs, config=config)
        rest = torch.tensor([ids[length:]])
        hidden = decoder(input_ids=rest, cache=own, use_cache=True).last_hidden_state
        targets = torch.tensor(mask[length + 1 :]).bool()
        logits = causal.get_output_embeddings()(hidden[0, :-1][targets]).float()
        picked = torch.log_softmax(logits, dim=-1).gather(1, rest[0, 1:][targets].unsqueeze(1))
        yield scale * picked.sum()
    # The gradient the sequences left on the prefix's keys and values, carried back through
    # the prefix: a part whose gradient is exactly that and whose value is zero.
    products = [
        (t * leaf.grad).sum() for t, leaf in zip(read, leaves, strict=True) if leaf.grad is not None
    ]
    if products:
        carried = torch.stack(products).sum()
        yield carried - carried.detach()


def _lowest_trained_layer(decoder: Any) -> int:
    """Index of ``decoder``'s lowest layer with a trainable weight (0 if it has no ``layers``)."""
    layers = list(getattr(decoder, "layers", []))
    if not layers:
        return 0
    trained = (
        i for i, layer in enumerate(layers) if any(p.requires_grad for p in layer.parameters())
    )
    return next(trained, len(layers))
