"""Batched generation speed of the ``local`` backend, with and without constrained decoding.

Prints, for batch sizes 1 and 16 on calc prompts, the generated tokens per second of
unconstrained and constrained greedy decoding, their ratio, and the share of the constrained
run's time spent computing and applying the llguidance token masks (the true overhead: the
constrained replies are shorter, so tokens/s alone also reflects prefill amortisation).
Run: ``python bench/generate_throughput.py [--max-tokens N]``. Measures; never asserts.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from ratchet.engine.models import Prompt, Sampling, constrain
from ratchet.engine.models.local import LocalModel
from ratchet.envs.calc import env as calc

mask_seconds = 0.0
_original_call = constrain.ToolCallConstraint.__call__


def _timed_call(self: Any, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    global mask_seconds
    started = time.perf_counter()
    result = _original_call(self, input_ids, scores)
    mask_seconds += time.perf_counter() - started
    return result


def calc_prompts(n: int) -> list[Prompt]:
    prompts = []
    for task in calc.tasks("train", n, seed=0):
        observation = calc.session(task).reset()
        prompts.append(Prompt(({"role": "user", "content": observation.text},), observation.tools))
    return prompts


def run(model: LocalModel, prompts: list[Prompt], max_tokens: int) -> tuple[float, int]:
    started = time.perf_counter()
    completions = model.complete(prompts, Sampling(temperature=0, max_tokens=max_tokens))
    return time.perf_counter() - started, sum(c.completion_tokens for c in completions)


def main() -> None:
    global mask_seconds
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    constrain.ToolCallConstraint.__call__ = _timed_call  # type: ignore[method-assign]
    model = LocalModel(None, threads=args.threads)
    print(f"torch threads: {torch.get_num_threads()}, max_tokens: {args.max_tokens}")
    run(model, calc_prompts(2), 4)  # warm-up: llguidance tokenizer, first-call allocations
    for batch_size in (1, 16):
        prompts = calc_prompts(batch_size)
        model.constrained = False
        free_s, free_tokens = run(model, prompts, args.max_tokens)
        model.constrained = True
        mask_seconds = 0.0
        constrained_s, constrained_tokens = run(model, prompts, args.max_tokens)
        free_rate, constrained_rate = free_tokens / free_s, constrained_tokens / constrained_s
        print(
            f"batch {batch_size:2d}: unconstrained {free_rate:6.1f} tok/s ({free_tokens} tokens), "
            f"constrained {constrained_rate:6.1f} tok/s ({constrained_tokens} tokens), "
            f"ratio {constrained_rate / free_rate:.3f}, "
            f"mask time {100 * mask_seconds / constrained_s:.1f}% of the constrained run"
        )


if __name__ == "__main__":
    main()
