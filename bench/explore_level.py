"""How many verified episodes exploration finds at one level, for one agent of a run.

An agent learns level L only from verified level-L episodes: passed, or relabelled by
hindsight from what a failed one did. The imitation bench (``imitation_ceiling.py``) says how
many of those a level needs; this says how many the explore options find. It plays a run's
agent on ``--tasks`` fresh training-split tasks of ``--level`` (problems the run never saw;
never probe or test tasks), ``--k`` samples each at the temperatures a round gives a task it
knows nothing of, every sample guided by the options given (as ``--explore-guided-share 1``),
and prints the passed samples, the distinct tasks solved, the verified lessons hindsight
makes of the failed ones per level, and the commonest sequences of calls.

``--extra-calls N`` withholds ``finish`` for N calls more than the level's (``ratchet improve``
withholds it for as many calls as the level, ``--explore-past-finish``): an agent whose every
episode opens with a call that only reads (a grid agent's ``look``) spends one of them on it.

    .venv/bin/python bench/explore_level.py runs/matrix/grid-seed2 --agent v1 --level 2 \\
        --copy-arguments --skip-repeats --extra-calls 0 1
"""

from __future__ import annotations

import argparse
import time
import zlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

from imitation_ceiling import draw  # bench/ is the script's own directory

from ratchet.core.agent import load_agent
from ratchet.core.env import problem_key_of
from ratchet.core.task import Task
from ratchet.engine.models import make_model
from ratchet.engine.rollout import Exploration, progress_bars, rollout
from ratchet.engine.store import DB_NAME, Store
from ratchet.envs.registry import load_env_reference
from ratchet.improve.config import CPU_ROLLOUT
from ratchet.improve.frontier import explore_temperatures
from ratchet.improve.hindsight import relabel_all
from ratchet.improve.practice import is_guided


def main() -> None:
    """Play one level with the explore options given; print what was verified."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a ratchet improve run directory")
    parser.add_argument("--agent", default="v1", help="the run's agent to play")
    parser.add_argument("--level", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--k", type=int, default=2, help="samples per task")
    parser.add_argument("--extra-calls", type=int, nargs="+", default=[0], metavar="N")
    parser.add_argument("--copy-arguments", action="store_true")
    parser.add_argument("--skip-repeats", action="store_true")
    parser.add_argument("--chain", action="store_true")
    parser.add_argument("--fresh-arguments", action="store_true")
    parser.add_argument("--first-tool", action="store_true", help="every sample")
    parser.add_argument("--last-tool", action="store_true", help="every second sample")
    parser.add_argument("--max-reply-tokens", type=int, default=CPU_ROLLOUT.max_reply_tokens)
    parser.add_argument("--seed", type=int, default=0)
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
    tasks = draw(env_ref, [args.level], args.tasks, args.seed + 4343, seen)
    agent, directory = load_agent(str(args.run / "agents" / args.agent))
    adapter = agent.adapter_path(directory)
    model = make_model("local", adapter=None if adapter is None else str(adapter))
    temperatures = explore_temperatures(None, args.k, agent.temperature)
    config = replace(CPU_ROLLOUT, max_reply_tokens=args.max_reply_tokens)

    for extra in args.extra_calls:

        def explore(task: Task, sample: int, extra: int = extra) -> Exploration:
            # Every second sample, as ratchet improve draws them when every sample is guided.
            drawn = args.last_tool and is_guided(sample, 0.5)
            return Exploration(
                temperatures[sample],
                task.difficulty + extra,
                first_tool=zlib.crc32(f"{task.id}:{sample}".encode()) if args.first_tool else None,
                last_tool=zlib.crc32(f"{task.id}:{sample}:last".encode()) if drawn else None,
                copy_arguments=args.copy_arguments,
                skip_repeats=args.skip_repeats,
                chain=args.chain,
                fresh=args.fresh_arguments,
            )

        started = time.perf_counter()
        with progress_bars() as progress:
            played = rollout(
                env,
                tasks,
                agent,
                model,
                config,
                k=args.k,
                seed=args.seed,
                progress=progress,
                explore=explore,
            )
        seconds = time.perf_counter() - started
        passed = [t for t in played if t.passed]
        relabelled = relabel_all(env, played, agent, env.max_difficulty)
        lessons = Counter(t.task.difficulty for t in relabelled.successes)
        solved = len({t.task.id for t in passed})
        print(
            f"finish after level + {extra} calls: {len(passed)} of {len(played)} samples passed, "
            f"{solved} of {len(tasks)} tasks; hindsight lessons by level "
            f"{dict(sorted(lessons.items()))} ({relabelled.trimmed} trims of passed samples)"
            f"  [{seconds:.0f} s]"
        )
        plans = Counter(" ".join(call.name for call in t.calls) for t in played)
        print("  commonest calls: " + "; ".join(f"{n} x {p}" for p, n in plans.most_common(5)))


if __name__ == "__main__":
    main()
