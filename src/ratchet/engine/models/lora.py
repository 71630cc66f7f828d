"""What every LoRA training run of a ``local`` model shares: the examples and the loop.

:func:`to_example` renders an episode exactly as the ``local`` backend prompts the model (so
what is trained is what is later prompted) and masks everything but the assistant's actions;
:func:`traced_examples` takes an episode's recorded token ids instead, where it has them;
:func:`lora_model` wraps the model with a fresh adapter or continues a saved one; :func:`optimise`
is the AdamW loop the SFT, DPO and GRPO losses all run in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import Progress

from ratchet.core.trajectory import Step, Trajectory
from ratchet.engine.models.base import LoraSettings, Prompt
from ratchet.engine.models.render import Render, render_prompt

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class Example:
    """One tokenised training sequence.

    Attributes:
        input_ids: Token ids of the whole conversation.
        assistant_masks: 1 on the tokens the loss is computed on, else 0.
        pattern: The episode's sequence of tool names, for balancing (see :func:`train_lora`).
    """

    input_ids: list[int]
    assistant_masks: list[int]
    pattern: str = ""


def to_example(
    tokenizer: Any,
    trajectory: Trajectory,
    max_tokens: int = 1024,
    failed: bool = False,
    render: Render = render_prompt,
) -> Example | None:
    """Tokenise an episode as the local backend would see it, masking all but its actions.

    Args:
        tokenizer: The model's tokenizer (with its chat template).
        trajectory: The episode.
        max_tokens: Longest sequence kept.
        failed: Keep the actions that failed (unparsed, or answered with an error) in the mask
            too: right for a policy gradient, which pushes bad actions down; wrong for SFT.
        render: How the model is prompted where the adapter will be used.

    A turn the conversation came with (:attr:`Step.given`) is context, never in the mask.
    Returns ``None`` if no assistant turn is left to learn from or the sequence is too long.
    """
    messages = list(trajectory.messages)
    ids: list[int] = []
    mask: list[int] = []
    rendered = ""
    assistant_turn = 0
    for index, message in enumerate(messages):
        # A demonstration shown before the task is context, never a target of this episode.
        if message["role"] != "assistant" or message.get("demonstration"):
            continue
        step = trajectory.steps[assistant_turn] if assistant_turn < len(trajectory.steps) else None
        assistant_turn += 1
        prefix = render(tokenizer, Prompt(tuple(messages[:index]), trajectory.tools), True)
        full = render(tokenizer, Prompt(tuple(messages[: index + 1]), trajectory.tools), False)
        if not prefix.startswith(rendered) or not full.startswith(prefix):
            return None  # a chat template that re-renders history cannot be trained this way
        context = tokenizer(prefix[len(rendered) :], add_special_tokens=False)["input_ids"]
        target_text = full[len(prefix) :].rstrip("\n")
        target = tokenizer(target_text, add_special_tokens=False)["input_ids"]
        learn = step is not None and learnable(step, failed)
        ids += context + target
        mask += [0] * len(context) + [int(learn)] * len(target)
        rendered = prefix + target_text
    if not any(mask) or len(ids) > max_tokens:
        return None
    pattern = ",".join(step.call.name for step in trajectory.steps if step.call is not None)
    return Example(ids, mask, pattern)


def learnable(step: Step, failed: bool = False) -> bool:
    """Whether training learns ``step``'s action (failed ones too with ``failed``)."""
    return not step.given and (failed or (step.call is not None and not step.failed))


def traced_examples(trajectory: Trajectory, model: str, max_tokens: int) -> list[Example] | None:
    """An episode's good actions as the model read and wrote them, token for token.

    Each learnable turn (:func:`learnable`) contributes its recorded prompt, masked, and its
    completion; a turn whose prompt continues the previous turn's tokens exactly extends that
    sequence, any other starts a new one (the model read the conversation tokenised afresh).
    Sequences over ``max_tokens`` are dropped.

    Args:
        trajectory: The episode.
        model: The trainer's model reference; traces of another model's tokenizer do not count.
        max_tokens: Longest sequence kept.

    Returns:
        ``None`` when some learnable turn has no trace of ``model``, or demonstrations were
        put before the task for training (the recorded prompts lack them): tokenise the text
        instead. Else the sequences (possibly none).
    """
    if any(message.get("demonstration") for message in trajectory.messages):
        return None
    turns = [step for step in trajectory.steps if learnable(step)]
    if not turns or any(s.tokens is None or s.tokens.model != model for s in turns):
        return None
    examples: list[Example] = []
    ids: list[int] = []
    mask: list[int] = []
    calls: list[str] = []
    for step in turns:
        assert step.tokens is not None and step.call is not None
        prompt = list(step.tokens.prompt_ids)
        if not ids or prompt[: len(ids)] != ids:
            if ids and len(ids) <= max_tokens:
                examples.append(Example(ids, mask, ",".join(calls)))
            ids, mask, calls = [], [], []
        completion = list(step.tokens.completion_ids)
        mask += [0] * (len(prompt) - len(ids)) + [1] * len(completion)
        ids = prompt + completion
        calls.append(step.call.name)
    if len(ids) <= max_tokens:
        examples.append(Example(ids, mask, ",".join(calls)))
    return examples


def lora_model(model: Any, settings: LoraSettings, start: Path | None = None) -> Any:
    """Wrap ``model`` with a trainable LoRA adapter: a fresh one, or the one saved at ``start``.

    A fresh adapter (rank ``settings.rank`` on :data:`LORA_TARGETS` of the top
    ``settings.depth`` share of the decoder layers) starts as the identity, so the wrapped model
    begins exactly as ``model``; a loaded one keeps its own rank and layers.
    """
    import peft
    import torch

    torch.manual_seed(settings.seed)
    if start is not None:
        trainable = peft.PeftModel.from_pretrained(model, str(start), is_trainable=True)
    else:
        total = model.config.num_hidden_layers
        top = min(total, max(1, round(settings.depth * total)))
        lora = peft.LoraConfig(
            r=settings.rank,
            lora_alpha=2 * settings.rank,
            lora_dropout=0.0,
            target_modules=LORA_TARGETS,
            # Every layer is peft's default: an adapter that names none loads anywhere.
            layers_to_transform=None if top == total else list(range(total - top, total)),
            task_type="CAUSAL_LM",
        )
        trainable = peft.get_peft_model(model, lora)
    trainable.train()
    return trainable


OnMicroBatch = Callable[[int, int], None]
"""``on_micro_batch(step, done)``: ``done`` micro-batches of step ``step`` (both from 1) are
backpropagated; a step of long episodes takes minutes, and this is how it shows it is alive."""


class _TrainingBar:
    """The training bar: steps as its count, micro-batches and the last loss as its label.

    For example ``training (batch 5/16, loss 0.412)`` beside ``3/30``.
    """

    def __init__(self, progress: Progress, label: str, steps: int, micro_batches: int | None):
        self.progress, self.label, self.micro_batches = progress, label, micro_batches
        self.bar = progress.add_task(label, total=steps)
        self.loss: float | None = None

    def micro_batch(self, done: int) -> None:
        total = self.micro_batches
        batch = f"batch {done}" if total is None else f"batch {min(done, total)}/{total}"
        self._describe(batch)

    def stepped(self, loss: float) -> None:
        self.loss = loss
        self._describe(None, advance=1)

    def _describe(self, batch: str | None, advance: int = 0) -> None:
        parts = [p for p in (batch, None if self.loss is None else f"loss {self.loss:.3f}") if p]
        suffix = f" ({', '.join(parts)})" if parts else ""
        self.progress.update(self.bar, advance=advance, description=self.label + suffix)


def optimise(
    trainable: Any,
    loss: Callable[[int], Any],
    settings: LoraSettings,
    progress: Progress | None = None,
    label: str = "training",
    micro_batches: int | None = None,
    on_micro_batch: OnMicroBatch | None = None,
) -> list[float]:
    """Run ``settings.steps`` AdamW steps on ``loss(step)`` and return the loss of each.

    ``loss(step)`` returns the step's loss tensor, or an iterable of parts that sum to it:
    each part is backpropagated as it comes, so only one part's activations live at a time.
    Cosine schedule with a 10% warm-up, gradients clipped to norm 1.

    Args:
        trainable: The model whose trainable parameters are optimised.
        loss: The step's loss, or its parts (micro-batches).
        settings: Steps and learning rate.
        progress: Progress display to add the training bar to, or ``None``.
        label: The bar's label.
        micro_batches: Parts a step's loss comes in, shown as the bar's ``batch N/M``
            (``None``: not known, shown as ``batch N``).
        on_micro_batch: Called after each part's backward pass, beside the bar.
    """
    import torch
    import transformers

    parameters = [p for p in trainable.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=settings.learning_rate, weight_decay=0.0)
    schedule = transformers.get_cosine_schedule_with_warmup(
        optimizer, max(1, settings.steps // 10), settings.steps
    )
    losses: list[float] = []
    bar = None if progress is None else _TrainingBar(progress, label, settings.steps, micro_batches)
    for step in range(1, settings.steps + 1):
        value = loss(step - 1)
        total = 0.0
        parts = [value] if isinstance(value, torch.Tensor) else value
        for done, part in enumerate(parts, start=1):
            part.backward()
            total += float(part.detach())
            if bar is not None:
                bar.micro_batch(done)
            if on_micro_batch is not None:
                on_micro_batch(step, done)
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(total)
        if bar is not None:
            bar.stepped(total)
    return losses
