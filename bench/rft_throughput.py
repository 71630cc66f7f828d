"""One rft proposal's training, three ways on the same episodes and batches, in one run.

Plays an env's oracle on training tasks of levels 1 and 2 (the verified successes a run's rft
trains on) and trains the same LoRA SFT on them (same seed, so the same batches) as:

- ``whole``: each sequence read whole, the adapter on every layer (the trainer before the
  shared prefix was read once);
- ``shared``: the batch's shared prefix read once, every layer;
- ``default``: as ``rft`` trains now (shared prefix, the adapter on the top
  ``--depth`` share of the layers, ``RftLever.lora_depth``).

Prints each way's optimiser steps per second (training only: the model's loading and the
tokenising are left out), its ratio to ``whole``, and the three loss curves side by side (mean
over each fifth of the steps). A step's loss is the mean token loss of its batch, so equal
batches give comparable curves; one adapter on fewer layers reaches a given loss in more
steps (``bench/imitation_ceiling.py --lora-depth`` measures what it then plays).

    PYTHONPATH=src python bench/rft_throughput.py [--env grid] [--steps 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ratchet.core.agent import Agent
from ratchet.engine.models import training
from ratchet.engine.models.base import LoraSettings
from ratchet.engine.rollout import rollout
from ratchet.envs.registry import load_env_reference
from ratchet.improve.levers.rft import RftLever


def train(episodes: list[Any], settings: LoraSettings, shared: bool) -> tuple[float, list[float]]:
    """Seconds the optimiser steps took, and the loss of each step."""
    timed: list[float] = []
    original_train, original_min = training.train_lora, training.SHARED_MIN

    def timed_train(*args: Any, **kwargs: Any) -> list[float]:
        started = time.perf_counter()
        losses = original_train(*args, **kwargs)
        timed.append(time.perf_counter() - started)
        return losses

    training.train_lora = timed_train
    training.SHARED_MIN = training.SHARED_MIN if shared else 10**9
    try:
        with tempfile.TemporaryDirectory() as work:
            result = training.LocalTrainer().sft(episodes, Path(work) / "adapter", settings)
    finally:
        training.train_lora, training.SHARED_MIN = original_train, original_min
    assert result is not None, "no episode fit the training context"
    return timed[0], list(result.losses)


def fifths(losses: list[float]) -> list[float]:
    """Mean loss over each fifth of the steps (each step's own loss under five steps)."""
    size = max(1, len(losses) // 5)
    return [
        statistics.mean(losses[i : i + size]) for i in range(0, min(len(losses), size * 5), size)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="grid")
    parser.add_argument("--tasks", type=int, default=32, help="oracle episodes per level")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--depth", type=float, default=RftLever().lora_depth)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    env = load_env_reference(args.env)
    tasks = [
        t for level in (1, 2) for t in env.tasks("train", args.tasks, seed=5, difficulty=level)
    ]
    episodes = [t for t in rollout(env, tasks, Agent(version="oracle"), None) if t.passed]
    print(f"{args.env}: {len(episodes)} oracle episodes, levels 1-2, {args.steps} steps of 4")
    full = LoraSettings(steps=args.steps, length_exponent=0.5)
    ways = {
        "whole": (full, False),
        "shared": (full, True),
        f"default (depth {args.depth:g})": (replace(full, depth=args.depth), True),
    }
    results = {name: train(episodes, settings, shared) for name, (settings, shared) in ways.items()}
    whole_rate = args.steps / results["whole"][0]
    print(f"{'way':<22}{'steps/s':>9}{'ratio':>8}   loss by fifths of the steps")
    for name, (seconds, losses) in results.items():
        rate = args.steps / seconds
        curve = "  ".join(f"{loss:.3f}" for loss in fifths(losses))
        print(f"{name:<22}{rate:>9.3f}{rate / whole_rate:>8.2f}   {curve}")


if __name__ == "__main__":
    main()
