"""What every LoRA training run of a ``local`` model shares: the examples and the loop.

:func:`to_example` renders an episode exactly as the ``local`` backend prompts the model (so
what is trained is what is later prompted) and masks everything but the assistant's actions;
:func:`lora_model` wraps the model with a fresh adapter or continues a saved one; :func:`optimise`
is the AdamW loop the SFT, DPO and GRPO losses all run in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import Progress

from ratchet.core.trajectory import Trajectory
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
        learn = failed or (step is not None and step.call is not None and not step.failed)
        ids += context + target
        mask += [0] * len(context) + [int(learn)] * len(target)
        rendered = prefix + target_text
    if not any(mask) or len(ids) > max_tokens:
        return None
    pattern = ",".join(step.call.name for step in trajectory.steps if step.call is not None)
    return Example(ids, mask, pattern)


def lora_model(model: Any, settings: LoraSettings, start: Path | None = None) -> Any:
    """Wrap ``model`` with a trainable LoRA adapter: a fresh one, or the one saved at ``start``.

    A fresh adapter (rank ``settings.rank`` on :data:`LORA_TARGETS`) starts as the identity,
    so the wrapped model begins exactly as ``model``; a loaded one keeps its own rank.
    """
    import peft
    import torch

    torch.manual_seed(settings.seed)
    if start is not None:
        trainable = peft.PeftModel.from_pretrained(model, str(start), is_trainable=True)
    else:
        lora = peft.LoraConfig(
            r=settings.rank,
            lora_alpha=2 * settings.rank,
            lora_dropout=0.0,
            target_modules=LORA_TARGETS,
            task_type="CAUSAL_LM",
        )
        trainable = peft.get_peft_model(model, lora)
    trainable.train()
    return trainable


def optimise(
    trainable: Any,
    loss: Callable[[int], Any],
    settings: LoraSettings,
    progress: Progress | None = None,
    label: str = "training",
) -> list[float]:
    """Run ``settings.steps`` AdamW steps on ``loss(step)`` and return the loss of each.

    ``loss(step)`` returns the step's loss tensor, or an iterable of parts that sum to it:
    each part is backpropagated as it comes, so only one part's activations live at a time.
    Cosine schedule with a 10% warm-up, gradients clipped to norm 1.
    """
    import torch
    import transformers

    parameters = [p for p in trainable.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=settings.learning_rate, weight_decay=0.0)
    schedule = transformers.get_cosine_schedule_with_warmup(
        optimizer, max(1, settings.steps // 10), settings.steps
    )
    losses: list[float] = []
    bar = progress.add_task(label, total=settings.steps) if progress else None
    for step in range(settings.steps):
        value = loss(step)
        total = 0.0
        for part in [value] if isinstance(value, torch.Tensor) else value:
            part.backward()
            total += float(part.detach())
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(total)
        if progress is not None and bar is not None:
            progress.update(bar, advance=1, description=f"{label} (loss {losses[-1]:.3f})")
    return losses
