"""DPO step time: Ratchet's own loop against TRL's ``DPOTrainer``, on the same pairs, in one run.

Both train a fresh rank-16 LoRA on the embedded SmolLM2-135M with reference log-probabilities
computed once before training, on pairs built from calc tasks (chosen: the oracle's first call;
rejected: ``finish`` with an empty answer), rendered as the local backend prompts. TRL gets the
same rendered text (it tokenises itself). Each side runs ``--steps`` steps ``--turns`` times,
alternating (own, TRL, own, TRL), so load drift on a shared machine hits both; the ratio of
median step times is printed. Needs the ``bench`` extra (TRL); prints, never asserts.

Measured on 2 shared, busy cores, one thread, 32 pairs of about 220 tokens, batch 4, 5 steps
twice: own loop 24.7 s, TRL 46.6 s per step (median), ratio 1.88.

    .venv/bin/python bench/preference_training.py [--steps 6] [--batch 4] [--threads 1] [--turns 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import patch

import torch
from rich.progress import Progress

import ratchet.engine.models.preference as preference
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import assistant_message
from ratchet.engine.harness import replay
from ratchet.engine.models.base import LoraSettings, Preference, Prompt
from ratchet.engine.models.checkpoints import load
from ratchet.engine.models.lora import lora_model, optimise
from ratchet.engine.models.preference import Loss, PairExample, pair_example, train_dpo
from ratchet.engine.models.render import render_prompt
from ratchet.envs.calc import env


def pairs(n: int) -> list[Preference]:
    found = []
    for task in env.tasks("train", n, difficulty=2):
        played = replay(env, task, env.oracle(task))
        first = played.steps[0].call
        assert first is not None
        rejected = ToolCall("finish", {"answer": ""}, id=first.id)
        found.append(
            Preference(
                played.messages[:2],
                played.tools,
                assistant_message(first),
                assistant_message(rejected),
            )
        )
    return found


class Timer:
    def __init__(self) -> None:
        self.marks: list[float] = []

    def tick(self) -> None:
        self.marks.append(time.perf_counter())

    def steps(self) -> list[float]:
        return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]


def own(examples: list[PairExample], settings: LoraSettings, out: Path) -> list[float]:
    timer = Timer()
    model, _ = load()

    def timed(
        trainable: Any,
        loss: Loss,
        settings: LoraSettings,
        progress: Progress | None = None,
        label: str = "",
    ) -> list[float]:
        def wrapped(step: int) -> Any:
            timer.tick()
            return loss(step)

        result = optimise(trainable, wrapped, settings, progress, label)
        timer.tick()
        return result

    # train_dpo calls preference's own binding of optimise, so that binding is the one replaced.
    with patch.object(preference, "optimise", timed):
        train_dpo(model, examples, out, settings)
    return timer.steps()


def trl(texts: list[dict[str, str]], settings: LoraSettings, out: Path) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl.trainer.dpo_config import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

    timer = Timer()

    class Tick(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            timer.tick()

        def on_train_end(self, *args: Any, **kwargs: Any) -> None:
            timer.tick()

    model, tokenizer = load()
    trainable = lora_model(model, settings)
    config = DPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=settings.batch_size,
        max_steps=settings.steps,
        learning_rate=settings.learning_rate,
        beta=settings.beta,
        precompute_ref_log_probs=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = DPOTrainer(
        model=trainable,
        args=config,
        train_dataset=Dataset.from_list(texts),
        processing_class=tokenizer,
        callbacks=[Tick()],
    )
    trainer.train()
    return timer.steps()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--turns", type=int, default=2)
    args = parser.parse_args()
    if importlib.util.find_spec("trl") is None:
        print("skipped: TRL is not installed (the bench extra)")
        return
    torch.set_num_threads(args.threads)
    found = pairs(32)
    _, tokenizer = load()
    examples = [e for e in (pair_example(tokenizer, p) for p in found) if e]
    texts = []
    for pair in found:
        prompt = render_prompt(tokenizer, Prompt(pair.messages, pair.tools))
        side = {}
        for key, message in (("chosen", pair.chosen), ("rejected", pair.rejected)):
            full = render_prompt(tokenizer, Prompt((*pair.messages, message), pair.tools), False)
            side[key] = full[len(prompt) :].rstrip("\n")
        texts.append({"prompt": prompt, **side})
    settings = LoraSettings(steps=args.steps, batch_size=args.batch, learning_rate=1e-4)
    tokens = statistics.mean(len(e.prompt_ids) + len(e.chosen_ids) for e in examples)
    print(f"{len(examples)} pairs, about {tokens:.0f} tokens per sequence, batch {args.batch}")
    times: dict[str, list[float]] = {"own": [], "trl": []}
    runs: dict[str, Callable[[Path], list[float]]] = {
        "own": lambda out: own(examples, settings, out),
        "trl": lambda out: trl(texts, settings, out),
    }
    with tempfile.TemporaryDirectory() as scratch:
        for turn in range(args.turns):
            for name, run in runs.items():
                # The first step of each run warms caches up; it is left out of the medians.
                steps = run(Path(scratch) / f"{name}{turn}")[1:]
                times[name] += steps
                print(
                    f"turn {turn} {name}: median step {statistics.median(steps):.2f} s", flush=True
                )
    mine, theirs = statistics.median(times["own"]), statistics.median(times["trl"])
    print(f"median step: own loop {mine:.2f} s, TRL DPOTrainer {theirs:.2f} s")
    print(f"TRL / own step time: {theirs / mine:.2f}")


if __name__ == "__main__":
    main()
