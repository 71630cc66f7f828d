"""shop episode throughput with and without KV-cache reuse in the local backend, in one run.

Plays the same shop tasks (difficulties 1 and 2) with the embedded model twice, with the same
sampling seeds: once prefilling every prompt whole (``kv_reuse=False``), once reusing the keys
and values of the shared system message and of each conversation's earlier turns
(``kv_reuse=True``, the default; the cache starts empty). Prints episodes/s, prompt tokens
served per second, the share of prompt tokens taken from the cache, the ratios, and how many
episodes made exactly the same calls both times (bf16 rounding can turn a near tie).

    PYTHONPATH=src python bench/kv_reuse.py [--tasks 4] [--turns 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import Budget
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.registry import load_env_reference


def timed_rollout(
    model: Any, reuse: bool, tasks: list, agent: Agent, config: RolloutConfig
) -> tuple[list[Trajectory], float, int]:
    """Trajectories, seconds, and prompt tokens taken from the cache."""
    complete = model.complete
    cached = 0

    def counting(prompts, sampling):
        nonlocal cached
        done = complete(prompts, sampling)
        cached += sum(c.metadata.get("cached_tokens", 0) for c in done)
        return done

    model.kv_reuse, model.complete = reuse, counting
    started = time.perf_counter()
    played = rollout(load_env_reference("shop"), tasks, agent, model, config, seed=11)
    elapsed = time.perf_counter() - started
    model.complete = complete
    return played, elapsed, cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=4, help="tasks per difficulty (1, 2)")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from ratchet.engine.models.local import LocalModel

    shop = load_env_reference("shop")
    tasks = [t for d in (1, 2) for t in shop.tasks("train", args.tasks, seed=3, difficulty=d)]
    model = LocalModel(threads=args.threads, max_batch_size=len(tasks))
    agent = Agent(model="local", max_turns=args.turns, temperature=args.temperature)
    config = RolloutConfig(len(tasks), 64, Budget(args.turns, 4096, 3600.0))
    timed_rollout(model, False, tasks[:2], Agent(model="local", max_turns=1), config)  # warm-up
    rows = {}
    for reuse in (False, True):
        played, seconds, cached = timed_rollout(model, reuse, tasks, agent, config)
        prompt_tokens = sum(t.prompt_tokens for t in played)
        rows[reuse] = (played, seconds, prompt_tokens, cached)
    print(
        f"shop d1-2, {len(tasks)} episodes of up to {args.turns} turns, batch {len(tasks)}, "
        f"{args.threads} thread(s), temperature {args.temperature}, embedded model (bf16)"
    )
    print(
        f"{'kv reuse':9} {'seconds':>8} {'episodes/s':>11} {'prompt tok/s':>13} "
        f"{'from cache':>11} {'steps':>6}"
    )
    for reuse, (played, seconds, prompt_tokens, cached) in rows.items():
        steps = sum(len(t.steps) for t in played)
        print(
            f"{'on' if reuse else 'off':9} {seconds:8.1f} {len(played) / seconds:11.4f} "
            f"{prompt_tokens / seconds:13.1f} {cached / max(1, prompt_tokens):11.1%} {steps:6}"
        )
    (off, off_s, off_tokens, _), (on, on_s, on_tokens, _) = rows[False], rows[True]
    same = sum(
        [s.output for s in a.steps] == [s.output for s in b.steps]
        for a, b in zip(off, on, strict=True)
    )
    print(
        f"ratio on/off: episodes/s {off_s / on_s:.2f}, "
        f"prompt tokens/s {(on_tokens / on_s) / (off_tokens / off_s):.2f}"
    )
    print(f"episodes with identical replies: {same}/{len(off)}")


if __name__ == "__main__":
    main()
