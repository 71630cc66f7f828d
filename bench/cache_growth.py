"""Decoding with a cache that grows in place against transformers' own, in one run.

transformers' ``DynamicCache`` copies every layer's keys and values into a new tensor at each
decoding step; the ``local`` backend's default cache (``kvcache.GrowingLayer``) appends into
spare room. This plays the same ``--tasks`` training tasks of ``--env`` at ``--level`` with the
embedded model at the practice's concurrency (16) both ways, alternating, ``--repeats`` times,
and prints per way the best wall seconds, the seconds inside the model's decoding steps
(one new token per row) and its prefill, then the ratios transformers' / in place. It also
plays a fixed list of turn-1 prompts both ways and says whether every reply is the same.
Measures; never asserts.

    .venv/bin/python bench/cache_growth.py [--env grid] [--tasks 16] [--level 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Any

from ratchet import make_env
from ratchet.core.agent import Agent
from ratchet.engine.models.base import Prompt, Sampling
from ratchet.engine.models.local import LocalModel
from ratchet.engine.rollout import RolloutConfig, rollout


def timed_model(grow_in_place: bool) -> tuple[LocalModel, dict[str, float]]:
    """A local model whose forward passes add their seconds to ``decode`` or ``prefill``."""
    model = LocalModel(None, grow_in_place=grow_in_place)
    seconds: dict[str, float] = defaultdict(float)
    forward = model.model.model.forward

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        output = forward(*args, **kwargs)
        part = "decode" if kwargs["input_ids"].shape[1] == 1 else "prefill"
        seconds[part] += time.perf_counter() - started
        return output

    model.model.model.forward = timed
    return model, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="grid")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--level", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    env = make_env(args.env)
    tasks = env.tasks("train", args.tasks, seed=6, difficulty=args.level)
    config = RolloutConfig(concurrency=16, max_reply_tokens=64)
    ways = {"transformers' cache": False, "in place": True}
    models = {name: timed_model(grow) for name, grow in ways.items()}
    prompts = []
    for task in tasks:
        observation = env.session(task).reset()
        prompts.append(Prompt(({"role": "user", "content": observation.text},), observation.tools))
    sampling = Sampling(temperature=1.0, max_tokens=48, seed=1)
    replies = {
        name: [c.text for c in m.complete(prompts, sampling)] for name, (m, _) in models.items()
    }
    best: dict[str, tuple[float, float, float]] = {}
    for _ in range(args.repeats):
        for name, (model, seconds) in models.items():
            model.clear_kv_cache()
            seconds.clear()
            started = time.perf_counter()
            rollout(env, tasks, Agent(temperature=0.7), model, config, seed=3)
            wall = time.perf_counter() - started
            if name not in best or wall < best[name][0]:
                best[name] = (wall, seconds["decode"], seconds["prefill"])
    print(
        f"{args.tasks} {args.env} level-{args.level} tasks, concurrency 16, best of {args.repeats}"
    )
    for name, (wall, decode, prefill) in best.items():
        print(f"  {name:20s} wall {wall:6.1f} s  decode {decode:6.1f} s  prefill {prefill:6.1f} s")
    (wall_0, decode_0, _), (wall_1, decode_1, _) = best.values()
    ratios = f"wall {wall_0 / wall_1:.2f}, decode {decode_0 / decode_1:.2f}"
    print(f"ratio (transformers' / in place): {ratios}")
    same = replies["transformers' cache"] == replies["in place"]
    print(f"turn-1 replies of {len(prompts)} prompts identical both ways: {same}")


if __name__ == "__main__":
    main()
