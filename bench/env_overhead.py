"""Env overhead: session start time and per-step cost of every registered env.

For each env, on the same number of test tasks: the time to start a session
(``env.session(task)`` plus ``reset()``) and the time of each oracle step (``session.step``),
as median and 90th percentile in milliseconds, with ratios to ``calc``'s medians measured in
the same run. Envs that fail to load are listed and skipped. The bench prints; it never asserts.

Run: ``.venv/bin/python bench/env_overhead.py [--tasks 50]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import dataclass

from ratchet.core.env import Env
from ratchet.envs.registry import EnvLoadError, env_names, make_env


@dataclass(frozen=True)
class Overhead:
    env: str
    start_ms: list[float]
    step_ms: list[float]


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def measure(env: Env, n_tasks: int) -> Overhead:
    start_ms: list[float] = []
    step_ms: list[float] = []
    plans = [(task, env.oracle(task)) for task in env.tasks("test", n_tasks)]
    # Planning allocates a lot; collect now so its garbage is not charged to the sessions.
    gc.collect()
    for task, calls in plans:
        tick = time.perf_counter()
        session = env.session(task)
        session.reset()
        start_ms.append((time.perf_counter() - tick) * 1000)
        try:
            for call in calls:
                tick = time.perf_counter()
                observation = session.step(call)
                step_ms.append((time.perf_counter() - tick) * 1000)
                if observation.done:
                    break
        finally:
            session.close()
    return Overhead(env.name, start_ms, step_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50, help="test tasks per env")
    args = parser.parse_args()
    results: list[Overhead] = []
    for name in env_names():
        try:
            env = make_env(name)
        except EnvLoadError as exc:
            print(f"skip {name}: {exc}")
            continue
        began = time.perf_counter()
        try:
            results.append(measure(env, args.tasks))
        except Exception as exc:  # one broken env must not hide the others' numbers
            print(f"skip {name}: {type(exc).__name__}: {exc}")
            continue
        print(f"measured {name} in {time.perf_counter() - began:.1f} s")
    base = next((r for r in results if r.env == "calc"), None)
    header = (
        f"{'env':<8} {'start med':>10} {'start p90':>10} {'x calc':>7} "
        f"{'step med':>10} {'step p90':>10} {'x calc':>7} {'steps':>6}"
    )
    print(f"\n{args.tasks} test tasks per env, times in ms, ratios to calc's medians\n")
    print(header)
    print("-" * len(header))
    for r in results:
        start, step = statistics.median(r.start_ms), statistics.median(r.step_ms)
        start_x = f"{start / statistics.median(base.start_ms):.1f}" if base else "-"
        step_x = f"{step / statistics.median(base.step_ms):.1f}" if base else "-"
        print(
            f"{r.env:<8} {start:>10.3f} {p90(r.start_ms):>10.3f} {start_x:>7} "
            f"{step:>10.3f} {p90(r.step_ms):>10.3f} {step_x:>7} {len(r.step_ms):>6}"
        )


if __name__ == "__main__":
    main()
