"""shop episode throughput with and without KV-cache reuse in the local backend, in one run.

1. Episodes: plays the same shop tasks (difficulties 1 and 2) with the embedded model twice,
   greedy by default so the replies can be compared: once prefilling every prompt whole
   (``kv_reuse=False``), once reusing the keys and values of the shared system message and of
   each conversation's earlier turns (``kv_reuse=True``, the default; the cache starts empty).
   Prints episodes/s, prompt tokens served per second, the share of prompt tokens taken from
   the cache, the ratios, and how many episodes made exactly the same calls both times (bf16
   rounding can turn a near tie either way, as a change of padding can).
2. Prefill: replays the prompt batches the first run sent, one token of reply each, with and
   without reuse (a fresh cache, filled turn by turn as in a run): prompt tokens made ready
   per second of prefill, and the ratio.

    PYTHONPATH=src python bench/kv_reuse.py [--tasks 4] [--turns 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING
from unittest.mock import patch

from ratchet.core.agent import Agent
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import Budget
from ratchet.engine.models.base import Completion, Prompt, Sampling
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.registry import load_env_reference

if TYPE_CHECKING:
    from ratchet.engine.models.local import LocalModel


def timed_rollout(
    model: LocalModel, reuse: bool, tasks: list[Task], agent: Agent, config: RolloutConfig
) -> tuple[list[Trajectory], float, int, list[list[Prompt]]]:
    """Trajectories, seconds, prompt tokens taken from the cache, and the batches sent."""
    complete = model.complete
    cached = 0
    sent: list[list[Prompt]] = []

    def recording(prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        nonlocal cached
        sent.append(list(prompts))
        done = complete(prompts, sampling)
        cached += sum(c.metadata.get("cached_tokens", 0) for c in done)
        return done

    model.kv_reuse = reuse
    with patch.object(model, "complete", recording):
        started = time.perf_counter()
        played = rollout(load_env_reference("shop"), tasks, agent, model, config, seed=11)
        elapsed = time.perf_counter() - started
    return played, elapsed, cached, sent


def prefill_rate(model: LocalModel, reuse: bool, batches: list[list[Prompt]]) -> float:
    """Prompt tokens per second of ``complete()`` calls that generate one token each."""
    model.kv_reuse = reuse
    model.clear_kv_cache()  # the replay fills it turn by turn, as a run does
    started, tokens = time.perf_counter(), 0
    for prompts in batches:
        done = model.complete(prompts, Sampling(temperature=0, max_tokens=1))
        tokens += sum(c.prompt_tokens for c in done)
    return tokens / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=4, help="tasks per difficulty (1, 2)")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from ratchet.engine.models.local import LocalModel

    shop = load_env_reference("shop")
    tasks = [t for d in (1, 2) for t in shop.tasks("train", args.tasks, seed=3, difficulty=d)]
    model = LocalModel(threads=args.threads, max_batch_size=len(tasks))
    agent = Agent(model="local", max_turns=args.turns, temperature=args.temperature)
    config = RolloutConfig(len(tasks), 96, Budget(args.turns, 4096, 3600.0))
    timed_rollout(model, False, tasks[:2], Agent(model="local", max_turns=1), config)  # warm-up
    rows = {reuse: timed_rollout(model, reuse, tasks, agent, config) for reuse in (False, True)}
    print(
        f"shop d1-2, {len(tasks)} episodes of up to {args.turns} turns, batch {len(tasks)}, "
        f"{args.threads} thread(s), temperature {args.temperature}, embedded model (bf16)"
    )
    print(
        f"{'kv reuse':9} {'seconds':>8} {'episodes/s':>11} {'prompt tok/s':>13} "
        f"{'from cache':>11} {'steps':>6}"
    )
    for reuse, (played, seconds, cached, _) in rows.items():
        prompt_tokens = sum(t.prompt_tokens for t in played)
        steps = sum(len(t.steps) for t in played)
        print(
            f"{'on' if reuse else 'off':9} {seconds:8.1f} {len(played) / seconds:11.4f} "
            f"{prompt_tokens / seconds:13.1f} {cached / max(1, prompt_tokens):11.1%} {steps:6}"
        )
    (off, off_s, _, sent), (on, on_s, _, _) = rows[False], rows[True]
    off_rate = sum(t.prompt_tokens for t in off) / off_s
    on_rate = sum(t.prompt_tokens for t in on) / on_s
    same = sum(
        [s.output for s in a.steps] == [s.output for s in b.steps]
        for a, b in zip(off, on, strict=True)
    )
    print(f"ratio on/off: episodes/s {off_s / on_s:.2f}, prompt tokens/s {on_rate / off_rate:.2f}")
    print(f"episodes with identical replies: {same}/{len(off)}")
    plain = prefill_rate(model, False, sent)
    reused = prefill_rate(model, True, sent)
    print(
        f"prefill replay of the {len(sent)} batches of the run without reuse: "
        f"{plain:.1f} -> {reused:.1f} prompt tokens/s, ratio {reused / plain:.2f}"
    )


if __name__ == "__main__":
    main()
