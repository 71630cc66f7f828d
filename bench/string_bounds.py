"""Invalid-JSON replies with and without string bounds in the grammar, in one run.

Plays the same shop and files tasks (difficulties 1 and 2) with the embedded model twice per
reply cap, with the same sampling seeds: once with the grammar as the tools' schemas give it
(strings unbounded) and once with every string and array bounded so that a whole call fits the
cap (``LocalModel(bounded=True)``, the default). Prints the share of steps whose reply did not
parse (almost always a JSON string cut by the cap), the pass rate, and the ratio.

    PYTHONPATH=src python bench/string_bounds.py [--tasks 4] [--caps 48,128] [--threads 1]
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter

from ratchet.core.agent import Agent
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import Budget
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.registry import load_env_reference


def invalid_rate(played: list[Trajectory]) -> tuple[float, int]:
    """Share of steps whose reply did not parse as a tool call, and the number of steps."""
    steps = [s for t in played for s in t.steps]
    return sum(s.call is None for s in steps) / max(1, len(steps)), len(steps)


def cut_tools(played: list[Trajectory]) -> str:
    """The tools that replies which did not parse were calling, most frequent first."""
    names = Counter(
        match.group(1) if (match := re.search(r'"name": "(\w+)"', s.output)) else "?"
        for t in played
        for s in t.steps
        if s.call is None
    )
    return ", ".join(f"{name} {n}" for name, n in names.most_common()) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=4, help="tasks per env and difficulty")
    parser.add_argument("--caps", default="48,128", help="reply token caps to compare")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from ratchet.engine.models.local import LocalModel

    model = LocalModel(threads=args.threads, max_batch_size=8)
    agent = Agent(model="local", max_turns=args.turns)
    print(f"embedded model, {args.tasks} tasks per env and difficulty (1, 2), {args.turns} turns")
    print(
        f"{'env':6} {'cap':>4}  {'invalid off':>11} {'invalid on':>10} {'ratio':>6}  "
        f"{'pass off':>8} {'pass on':>7}  steps off/on  minutes"
    )
    for name in ("shop", "files"):
        env = load_env_reference(name)
        tasks = [t for d in (1, 2) for t in env.tasks("train", args.tasks, seed=3, difficulty=d)]
        for cap in (int(c) for c in args.caps.split(",")):
            config = RolloutConfig(8, cap, Budget(args.turns, 4096, 3600.0))
            rates, passes, counts, cut = [], [], [], ""
            started = time.perf_counter()
            for bounded in (False, True):
                model.bounded = bounded
                played = rollout(env, tasks, agent, model, config, seed=11)
                rate, steps = invalid_rate(played)
                rates.append(rate)
                counts.append(steps)
                passes.append(sum(t.passed for t in played) / len(played))
                cut = cut_tools(played)
            minutes = (time.perf_counter() - started) / 60
            ratio = rates[1] / rates[0] if rates[0] else float("nan")
            print(
                f"{name:6} {cap:>4}  {rates[0]:>11.1%} {rates[1]:>10.1%} {ratio:>6.2f}  "
                f"{passes[0]:>8.2f} {passes[1]:>7.2f}  {counts[0]:>5}/{counts[1]:<5}  "
                f"{minutes:6.1f}",
                flush=True,
            )
            print(f"       replies that did not parse, with bounds, by tool: {cut}", flush=True)


if __name__ == "__main__":
    main()
