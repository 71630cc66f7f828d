"""Ray env workers: episodes/s with 1 worker against 2, for an env whose steps wait 50 ms.

The env is calc with a 50 ms wait in every step (a stand-in for envs whose steps wait on a
container, a browser or a database); the oracle plays it, so no model time is involved. Each
worker plays a fixed number of episodes at once, so a second worker doubles the episodes in
flight. Workers are started and warmed up before the clock starts. Prints episodes/s with 1 and
with 2 workers on a local Ray instance, and their ratio, measured in one run.

    .venv/bin/python bench/ray_workers.py [--episodes 48] [--per-worker 4]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.env import Session
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation
from ratchet.core.verdict import Verdict
from ratchet.envs.calc import env as calc

STEP_WAIT_S = 0.05


class _Waiting:
    """A calc session whose every step waits 50 ms first."""

    def __init__(self, inner: Session) -> None:
        self.inner = inner

    def reset(self) -> Observation:
        return self.inner.reset()

    def step(self, call: ToolCall) -> Observation:
        time.sleep(STEP_WAIT_S)
        return self.inner.step(call)

    def verify(self) -> Verdict:
        return self.inner.verify()

    def close(self) -> None:
        self.inner.close()


class SlowCalc:
    """calc, with sessions whose steps wait (loaded by the workers as ``ray_workers.py:env``)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(calc, name)

    def session(self, task: Task) -> _Waiting:
        return _Waiting(calc.session(task))


env = SlowCalc()


def rate(workers: int, per_worker: int, tasks: list[Task]) -> float:
    from ratchet.engine.cluster import RayConfig, RayPool
    from ratchet.engine.request import RolloutRequest

    with RayPool(
        f"{__file__}:env", {}, RayConfig(workers=workers, episodes_per_worker=per_worker)
    ) as pool:
        # Start and warm up the workers.
        pool.rollout(RolloutRequest(env, tasks[:workers], Agent(version="oracle")))
        started = time.perf_counter()
        played = pool.rollout(RolloutRequest(env, tasks, Agent(version="oracle")))
        elapsed = time.perf_counter() - started
    assert all(t.passed for t in played)
    return len(tasks) / elapsed


def main() -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--per-worker", type=int, default=4)
    args = parser.parse_args()
    tasks = calc.tasks("test", args.episodes, seed=0, difficulty=3)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        one = rate(1, args.per_worker, tasks)
        two = rate(2, args.per_worker, tasks)
    finally:
        ray.shutdown()
    print(
        f"{len(tasks)} episodes of 4 steps, {STEP_WAIT_S * 1000:.0f} ms wait per step, "
        f"{args.per_worker} episodes at once per worker"
    )
    print(f"1 worker:  {one:.2f} episodes/s")
    print(f"2 workers: {two:.2f} episodes/s")
    print(f"2 workers / 1 worker: {two / one:.2f}x")


if __name__ == "__main__":
    main()
