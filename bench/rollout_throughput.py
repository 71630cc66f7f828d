"""Rollout throughput: the harness against a bare batched generate loop, in one run.

Prints (1) the harness's aggregate generated tokens/s on the embedded model divided by a bare
loop of batched ``complete()`` calls on exactly the prompt batches the harness sent (recorded,
then replayed), so the ratio isolates the harness's own cost (aim: >= 0.8), and (2) the
harness + env overhead per step with the fake model (no model time at all).

    .venv/bin/python bench/rollout_throughput.py [--batch 16] [--turns 3]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from unittest.mock import patch

from ratchet.core.agent import Agent
from ratchet.core.task import Task
from ratchet.engine.models.base import Completion, Model, Prompt, Sampling
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.calc import env

Batch = tuple[list[Prompt], Sampling]
"""A batch of prompts the harness sent, with the sampling it asked for."""


def harness_rate(
    model: Model, tasks: list[Task], turns: int, batch: int
) -> tuple[float, list[Batch]]:
    """Tokens/s of a rollout, and the prompt batches it sent (with their sampling)."""
    sent: list[Batch] = []
    complete = model.complete

    def recording(prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        sent.append((list(prompts), sampling))
        return complete(prompts, sampling)

    agent = Agent(model="local", max_turns=turns)
    config = RolloutConfig(concurrency=batch, max_reply_tokens=48)
    with patch.object(model, "complete", recording):
        started = time.perf_counter()
        played = rollout(env, tasks, agent, model, config, seed=1)
        elapsed = time.perf_counter() - started
    return sum(t.completion_tokens for t in played) / elapsed, sent


def bare_rate(model: Model, batches: list[Batch]) -> float:
    """Tokens/s of plain complete() calls on the given prompt batches."""
    started, tokens = time.perf_counter(), 0
    for prompts, sampling in batches:
        tokens += sum(c.completion_tokens for c in model.complete(prompts, sampling))
    return tokens / (time.perf_counter() - started)


def fake_overhead_ms(n: int) -> float:
    tasks = env.tasks("test", n, difficulty=3)

    def oracle(prompt: Prompt, rng: random.Random) -> str:
        shown = {m["content"] for m in prompt.messages if m["role"] == "user"}
        task = next(t for t in tasks if t.instruction in shown)
        step = sum(1 for m in prompt.messages if m["role"] == "tool")
        call = env.oracle(task)[step]
        return json.dumps({"name": call.name, "arguments": call.arguments})

    started = time.perf_counter()
    played = rollout(env, tasks, Agent(model="fake"), FakeModel(reply=oracle))
    steps = sum(len(t.steps) for t in played)
    return 1000 * (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    from ratchet.engine.models.local import LocalModel

    model = LocalModel(max_batch_size=args.batch)
    tasks = env.tasks("test", args.batch, difficulty=2)
    harness_rate(model, tasks[:2], 1, 2)  # warm up: first-call costs are not throughput
    harness, sent = harness_rate(model, tasks, args.turns, args.batch)
    bare = bare_rate(model, sent)
    print(f"batch {args.batch}, {args.turns} turns, embedded model, constrained decoding")
    print(f"  bare batched complete(): {bare:7.1f} generated tokens/s")
    print(f"  harness rollout:         {harness:7.1f} generated tokens/s")
    print(f"  ratio harness / bare:    {harness / bare:7.2f}  (aim >= 0.8)")
    print(f"harness + env overhead per step (fake model): {fake_overhead_ms(200):.3f} ms")


if __name__ == "__main__":
    main()
