"""Verified episodes found at one level: tree search against the old per-env flags, same budget.

An agent learns level L only from verified level-L episodes (passed, or relabelled by hindsight
from what a failed one did). This plays one agent of a run on ``--tasks`` fresh training-split
tasks of ``--level`` (problems the run never saw; never probe or test tasks) two ways:

- ``search``: what ``ratchet improve`` does now (:func:`ratchet.improve.explore.explore`): ``k``
  samples a task, then branches for the tasks no sample solved, strategies by measured yield;
- ``flags``: plain sampling as the rows of docs/results.md explored before the search existed,
  with the env's flag mix of those rows expressed as one fixed strategy on every second sample
  (past-finish, which withheld ``finish`` for as many calls as the level, as ``extend``), and as
  many samples a task as the search played on average.

For each it prints the passed samples, the verified level-L episodes (passed, plus hindsight's
level-L lessons) per 100 samples and per million tokens (read and generated), and the minutes.

    .venv/bin/python bench/explore_compare.py runs/base-grid0 --agent v1 --level 2
"""

from __future__ import annotations

import argparse
import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from imitation_ceiling import draw  # bench/ is the script's own directory

from ratchet.core.agent import Agent, load_agent
from ratchet.core.env import Env, problem_key_of
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.models import Model, make_model
from ratchet.engine.rollout import RolloutConfig, Steer, progress_bars, rollout
from ratchet.engine.store import DB_NAME, Store
from ratchet.envs.registry import load_env_reference
from ratchet.improve.config import CPU_ROLLOUT
from ratchet.improve.explore import SearchConfig, explore
from ratchet.improve.explore.branch import Branch
from ratchet.improve.explore.strategies import POLICY, Strategy
from ratchet.improve.frontier import explore_temperatures
from ratchet.improve.hindsight import relabel_all

FLAGS = {
    "calc": Strategy("flags", copy_arguments=True, chain=True),
    "grid": Strategy("flags", copy_arguments=True, skip_repeats=True),
    "files": Strategy("flags", copy_arguments=True, drawn_tool=True),
    "shop": Strategy("flags", copy_arguments=True),
}
"""Each env's flag mix in the rows of docs/results.md before the search, as one strategy."""


def main() -> None:
    """Play one level both ways; print what each verified."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a ratchet improve run directory")
    parser.add_argument("--agent", default="v1", help="the run's agent to play")
    parser.add_argument("--level", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--k", type=int, default=2, help="root samples per task")
    parser.add_argument("--max-reply-tokens", type=int, default=CPU_ROLLOUT.max_reply_tokens)
    parser.add_argument("--max-turns", type=int, default=None, help="default: level + 2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=("search", "flags"), default=None)
    args = parser.parse_args()

    if not (args.run / DB_NAME).is_file():
        raise SystemExit(f"{args.run} is not a run directory: it has no {DB_NAME}")
    with Store(args.run) as store:
        experience = [t for _, t in store.trajectories()]
    if not experience:
        raise SystemExit(f"{args.run} holds no episodes")
    env_ref = experience[0].task.env
    env = load_env_reference(env_ref)
    seen = {problem_key_of(env)(t.task.params) for t in experience}
    tasks = draw(env_ref, [args.level], [args.tasks], args.seed + 4343, seen)
    agent, directory = load_agent(str(args.run / "agents" / args.agent))
    adapter = agent.adapter_path(directory)
    model = make_model("local", adapter=None if adapter is None else str(adapter))
    max_turns = args.max_turns or args.level + 2
    config = replace(
        CPU_ROLLOUT,
        max_reply_tokens=args.max_reply_tokens,
        budget=replace(CPU_ROLLOUT.budget, max_turns=max_turns),
    )
    history = [t for t in experience if t.task.split == "train"]
    temperatures = explore_temperatures(None, args.k, agent.temperature)
    samples = args.k
    if args.only != "flags":
        started = time.perf_counter()
        played = _search(env, tasks, agent, model, config, args.k, temperatures, history, args)
        _report("search", env, agent, args.level, played, time.perf_counter() - started)
        samples = max(args.k, math.ceil(len(played) / len(tasks)))
    if args.only != "search":
        started = time.perf_counter()
        played = _flags(env, tasks, agent, model, config, samples, temperatures, args.seed)
        _report(
            f"flags (k={samples})", env, agent, args.level, played, time.perf_counter() - started
        )


def _search(
    env: Env,
    tasks: Sequence[Task],
    agent: Agent,
    model: Model,
    config: RolloutConfig,
    k: int,
    temperatures: list[float],
    history: list[Trajectory],
    args: argparse.Namespace,
) -> list[Trajectory]:
    with progress_bars() as progress:

        def play(
            wave: Sequence[Task], samples: int, first: int, steer: Steer, label: str
        ) -> list[Trajectory]:
            return rollout(
                env,
                wave,
                agent,
                model,
                config,
                k=samples,
                seed=args.seed,
                first_sample=first,
                progress=progress,
                description=label,
                steer=steer,
            )

        explored = explore(
            tasks,
            k,
            0,
            {task.id: temperatures for task in tasks},
            play,
            config=SearchConfig(),
            search=True,
            history=history,
            max_turns=config.budget.max_turns or 4,
            seed=args.seed,
        )
    print(f"  search record: {explored.record}")
    return explored.episodes


def _flags(
    env: Env,
    tasks: Sequence[Task],
    agent: Agent,
    model: Model,
    config: RolloutConfig,
    k: int,
    temperatures: list[float],
    seed: int,
) -> list[Trajectory]:
    flags = FLAGS.get(env.name, POLICY)
    spread = [temperatures[i % len(temperatures)] for i in range(k)]

    def steer(task: Task, sample: int) -> Branch:
        guided = sample % 2 == 1  # every second sample, as the rows' guided share of 0.5
        strategy = replace(flags, extend=task.difficulty) if guided else POLICY
        draw = zlib.crc32(f"{task.id}:{sample}".encode())
        return Branch(strategy, spread[sample], instruction=task.instruction, draw=draw)

    with progress_bars() as progress:
        return rollout(
            env, tasks, agent, model, config, k=k, seed=seed, progress=progress, steer=steer
        )


def _report(
    label: str, env: Env, agent: Agent, level: int, played: list[Trajectory], seconds: float
) -> None:
    passed = [t for t in played if t.passed and t.task.difficulty == level]
    relabelled = relabel_all(env, played, agent, env.max_difficulty)
    lessons = [t for t in relabelled.successes if t.task.difficulty == level]
    # Hindsight's relabels of failed episodes; a trim re-verifies a passed one.
    verified = len(passed) + len([t for t in lessons if t.metadata.get("source_task") != t.task.id])
    tokens = sum(t.tokens for t in played)
    generated = sum(t.completion_tokens for t in played)
    solved = len({t.task.id for t in passed})
    print(
        f"{label}: {len(passed)} of {len(played)} samples passed ({solved} tasks); "
        f"verified level-{level} episodes {verified}: {100 * verified / len(played):.1f} per 100 "
        f"samples, {1e6 * verified / max(tokens, 1):.1f} per million tokens "
        f"({tokens:,} read and generated, {generated:,} generated); {seconds / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
