"""What the embedded model learns from perfect demonstrations: the ceiling a lever works under.

Self-improvement can only teach what the model can learn from verified episodes at the
matrix's training budget. This plays the env's oracle on ``--demos`` training tasks per level,
trains one LoRA adapter on them exactly as ``rft`` does (``--steps`` optimiser steps, batches
of four), and plays the base and the trained agent on ``--eval`` other training-split tasks per
level (a second draw whose problems the demonstrations do not hold; never probe or test
tasks). It prints, per level, the pass@1 of each with 95% Wilson intervals. A level the
adapter does not learn here is out of reach of any lever that imitates verified successes at
this budget; a level it learns says the bottleneck is finding the successes.

    .venv/bin/python bench/imitation_ceiling.py --env calc --levels 1 2 --demos 48 --steps 30
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from ratchet.core.agent import Agent
from ratchet.core.env import problem_key_of
from ratchet.core.stats import wilson
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.models import make_model
from ratchet.engine.models.base import LoraSettings
from ratchet.engine.models.training import LocalTrainer
from ratchet.engine.rollout import RolloutConfig, progress_bars, rollout
from ratchet.envs.registry import load_env_reference
from ratchet.improve.levers.demos import from_oracle
from ratchet.improve.levers.rft import RftLever


def draw(
    env_ref: str, levels: list[int], counts: list[int], seed: int, avoid: set[str]
) -> list[Task]:
    """``counts[i]`` training-split tasks of ``levels[i]`` whose problems are not in ``avoid``."""
    env = load_env_reference(env_ref)
    key = problem_key_of(env)
    tasks = []
    for level, n in zip(levels, counts, strict=True):
        drawn = env.tasks("train", n + len(avoid), seed=seed, difficulty=level)
        tasks += [t for t in drawn if key(t.params) not in avoid][:n]
    return tasks


def rates(trajectories: list[Trajectory], levels: list[int]) -> str:
    """Pass@1 per level, with 95% Wilson intervals."""
    out = []
    for level in levels:
        played = [t for t in trajectories if t.task.difficulty == level]
        passed = sum(t.passed for t in played)
        interval = wilson(passed, len(played))
        out.append(f"L{level} {passed}/{len(played)} ({interval.low:.2f}-{interval.high:.2f})")
    return ", ".join(out)


def main() -> None:
    """Train on oracle demonstrations, evaluate base and trained, print pass@1 per level."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="calc")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--demos",
        type=int,
        nargs="+",
        default=[48],
        help="demonstrations per level: one count for every level, or one count per level",
    )
    parser.add_argument("--eval", type=int, default=24, help="evaluation tasks per level")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--lora-depth",
        type=float,
        default=RftLever().lora_depth,
        help="share of the layers adapted, from the top (default: rft's)",
    )
    parser.add_argument(
        "--length-exponent",
        type=float,
        default=0.5,
        help="how batches share out over episode lengths, as rft's length_exponent",
    )
    parser.add_argument("--max-reply-tokens", type=int, default=96)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-base", action="store_true", help="evaluate the trained agent only")
    args = parser.parse_args()

    env = load_env_reference(args.env)
    key = problem_key_of(env)
    counts = args.demos * len(args.levels) if len(args.demos) == 1 else args.demos
    if len(counts) != len(args.levels):
        parser.error(f"--demos takes one count or one per level ({len(args.levels)})")
    demo_tasks = draw(args.env, args.levels, counts, args.seed, set())
    eval_tasks = draw(
        args.env,
        args.levels,
        [args.eval] * len(args.levels),
        args.seed + 1000,
        {key(t.params) for t in demo_tasks},
    )
    base = Agent(max_turns=args.max_turns)
    demos = [t for t in from_oracle(env, demo_tasks, base) if t.passed]
    print(f"{args.env}: {len(demos)} verified oracle demonstrations over levels {args.levels}")
    config = RolloutConfig(max_reply_tokens=args.max_reply_tokens)
    if not args.skip_base:
        started = time.perf_counter()
        played = rollout(env, eval_tasks, base, make_model("local"), config, seed=args.seed)
        print(f"base:    {rates(played, args.levels)}  [{time.perf_counter() - started:.0f} s]")
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "adapter"
        settings = LoraSettings(
            args.steps,
            4,
            args.learning_rate,
            16,
            seed=args.seed,
            length_exponent=args.length_exponent,
            depth=args.lora_depth,
        )
        started = time.perf_counter()
        with progress_bars() as progress:
            result = LocalTrainer().sft(demos, out, settings, progress)
        assert result is not None, "no demonstration fit the training context"
        losses = result.losses
        print(
            f"trained: {result.examples} examples, {len(losses)} steps, loss "
            f"{losses[0]:.3f} -> {losses[-1]:.3f}  [{time.perf_counter() - started:.0f} s]"
        )
        trained = replace(base, version="imitated", adapter=str(out))
        model = make_model("local", adapter=str(out))
        started = time.perf_counter()
        played = rollout(env, eval_tasks, trained, model, config, seed=args.seed)
        print(f"trained: {rates(played, args.levels)}  [{time.perf_counter() - started:.0f} s]")


if __name__ == "__main__":
    main()
