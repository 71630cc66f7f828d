"""LoRA SFT step time with and without reading a batch's shared prefix once, in one run.

Plays an env's tasks (levels 1 and 2) with the oracle, tokenises the episodes exactly as the
local backend prompts the embedded model, and times SFT steps (the same batches of four) two
ways: each sequence read whole, and the prefix all four share (the system message and as much
of the tool list as every world has in common) read once (``summed_logp_parts``). Prints the
median seconds per step of each, their ratio, the shared prefix's share of the tokens, and how
close the two gradients are.

    PYTHONPATH=src python bench/prefix_training.py [--env shop] [--steps 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from ratchet.core.agent import Agent
from ratchet.engine.models.base import LoraSettings
from ratchet.engine.models.lora import lora_model, to_example
from ratchet.engine.models.training import shared_prefix, summed_logp_parts
from ratchet.engine.rollout import rollout
from ratchet.envs.registry import load_env_reference


def step(model: Any, batch: list[tuple[list[int], list[int]]], shared: bool) -> tuple[float, Any]:
    """One step's backward passes (no optimiser step): seconds and the flat gradient."""
    import torch

    model.zero_grad()
    scale = -1.0 / sum(sum(mask[1:]) for _, mask in batch)
    groups = [batch] if shared else [[sequence] for sequence in batch]
    started = time.perf_counter()
    for group in groups:
        for part in summed_logp_parts(model, group, scale):
            part.backward()
    seconds = time.perf_counter() - started
    grads = [p.grad.flatten().float() for p in model.parameters() if p.grad is not None]
    return seconds, torch.cat(grads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="shop")
    parser.add_argument("--steps", type=int, default=3, help="timed steps of each kind")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    from ratchet.engine.models.checkpoints import load

    torch.set_num_threads(args.threads)
    env = load_env_reference(args.env)
    tasks = [t for level in (1, 2) for t in env.tasks("train", 8, seed=3, difficulty=level)]
    episodes = rollout(env, tasks, Agent(version="oracle"), None)
    model, tokenizer = load(None)
    examples = [e for e in (to_example(tokenizer, t, 3072) for t in episodes) if e]
    trainable = lora_model(model, LoraSettings())
    rng = random.Random(0)
    times: dict[bool, list[float]] = {False: [], True: []}
    prefix_share, cosines = [], []
    for _ in range(args.steps):
        batch = [(e.input_ids, e.assistant_masks) for e in rng.sample(examples, 4)]
        prefix_share.append(4 * shared_prefix(batch) / sum(len(ids) for ids, _ in batch))
        whole, grad_whole = step(trainable, batch, shared=False)
        once, grad_once = step(trainable, batch, shared=True)
        times[False].append(whole)
        times[True].append(once)
        cosines.append(float(torch.nn.functional.cosine_similarity(grad_whole, grad_once, 0)))
    whole, once = statistics.median(times[False]), statistics.median(times[True])
    lengths = [len(e.input_ids) for e in examples]
    print(f"{len(examples)} oracle {args.env} episodes, {min(lengths)}-{max(lengths)} tokens")
    print(f"shared prefix: {statistics.mean(prefix_share):.0%} of a batch's tokens")
    print(f"seconds per step of 4: whole {whole:.1f}, prefix once {once:.1f}")
    print(f"speed-up x{whole / once:.2f}; gradient cosine min {min(cosines):.5f}")


if __name__ == "__main__":
    main()
