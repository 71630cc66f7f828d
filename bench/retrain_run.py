"""Retrain ``rft`` (or ``pairs``) on a finished run's experience with other settings, offline.

A row of the results matrix takes an hour; whether another training setting would have
learned more from the same experience takes minutes to check. This reads the training
episodes of a run directory, keeps what ``rft`` keeps (``RftLever.successes``), trains one
adapter on them with the given ``--steps`` and ``--length-exponent``, and plays it
on ``--eval`` fresh training-split tasks per level whose problems the experience does not
hold (never probe or test tasks). With ``--compare`` the run's own agent of that version
(its adapter as the run trained it; ``--compare v2``: another of its agents) plays the same
tasks with the same seed. It prints pass@1 per level with 95% Wilson intervals; one training
seed says little on its own.

With ``--pairs K`` it tries the ``pairs`` lever instead: the agent plays each task of its own
training episodes K more times as it is (unguided), the lever's DPO pairs are mined from those
and the run's episodes (:func:`~ratchet.improve.levers.pairs.mine_pairs`), and the agent's
adapter is continued on them with DPO (``--steps``, ``--learning-rate``, ``--beta``,
``--chosen-nll-weight``). That contrasts what the run's guided samples did with what the agent
does alone, e.g. a second call against an early ``finish``. ``--anchor-weight W [W ...]`` and
``--beta B [B ...]`` train one adapter per combination on the same pairs, anchored by the run's
verified successes (weight 0: no anchor; beta 0 with an anchor: the anchor's SFT alone), and
play each.

    .venv/bin/python bench/retrain_run.py runs/matrix/calc-seed1 --agent v3 --compare \\
        --length-exponent 0.5 --steps 90
    .venv/bin/python bench/retrain_run.py runs/matrix/calc-seed2 --agent v1 --pairs 2 --steps 30
    .venv/bin/python bench/retrain_run.py runs/matrix/calc-seed2 --agent v1 --pairs 2 --steps 30 \\
        --anchor-weight 0 1 --beta 0.1 0 --compare v2
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from imitation_ceiling import draw, rates  # bench/ is the script's own directory

from ratchet.core.agent import Agent, load_agent
from ratchet.core.env import Env, problem_key_of
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.models import make_model
from ratchet.engine.models.base import LoraSettings, Preference
from ratchet.engine.models.training import LocalTrainer
from ratchet.engine.rollout import progress_bars, rollout
from ratchet.engine.store import DB_NAME, Store
from ratchet.envs.registry import load_env_reference
from ratchet.improve.config import CPU_ROLLOUT
from ratchet.improve.levers.pairs import PairsLever, groups, mine_pairs
from ratchet.improve.levers.rft import RftLever
from ratchet.improve.levers.weights import WeightLever, lora_settings


def play(env: Env, tasks: list[Task], agent: Agent, adapter: Path, seed: int) -> str:
    """Play ``tasks`` once each as ``agent`` with ``adapter``; its pass@1 per level."""
    started = time.perf_counter()
    model = make_model("local", adapter=str(adapter))
    played = rollout(env, tasks, agent, model, CPU_ROLLOUT, seed=seed)
    levels = sorted({t.difficulty for t in tasks})
    return f"{rates(played, levels)}  [{time.perf_counter() - started:.0f} s]"


def main() -> None:
    """Retrain on a run's successes, then play the adapter (and the run's own) per level."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a ratchet improve run directory")
    parser.add_argument("--agent", default="v1", help="the run's agent whose settings to use")
    parser.add_argument(
        "--compare",
        nargs="?",
        const="",
        metavar="AGENT",
        help="also play an agent's adapter as the run trained it (default: --agent's)",
    )
    parser.add_argument("--steps", type=int, default=90)
    parser.add_argument(
        "--learning-rate", type=float, help="default: the lever's (rft's, or pairs' with --pairs)"
    )
    parser.add_argument("--length-exponent", type=float, default=1.0)
    parser.add_argument("--pairs", type=int, default=0, help="DPO: unguided samples per task")
    parser.add_argument(
        "--beta", type=float, nargs="+", default=[PairsLever.beta], help="DPO's betas"
    )
    parser.add_argument(
        "--chosen-nll-weight",
        type=float,
        default=PairsLever.chosen_nll_weight,
        help="DPO: weight of the SFT term on each pair's chosen action (0: plain DPO)",
    )
    parser.add_argument(
        "--anchor-weight",
        type=float,
        nargs="+",
        default=[PairsLever.anchor_weight],
        help="DPO: weights of the SFT term on the run's verified successes, one adapter each",
    )
    parser.add_argument("--eval", type=int, default=24, help="evaluation tasks per level")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if not (args.run / DB_NAME).is_file():
        raise SystemExit(f"{args.run} is not a run directory: it has no {DB_NAME}")
    with Store(args.run) as store:
        experience = [t for _, t in store.trajectories(split="train")]
    if not experience:
        raise SystemExit(f"{args.run} holds no training episodes")
    env_ref = experience[0].task.env
    env = load_env_reference(env_ref)
    rft = RftLever(args.steps)
    pairs_lever = PairsLever(args.steps)
    if args.learning_rate is not None:
        rft = replace(rft, learning_rate=args.learning_rate)
        pairs_lever = replace(pairs_lever, learning_rate=args.learning_rate)
    successes = rft.successes(experience, env_ref)
    levels = sorted({t.task.difficulty for t in successes})
    counts = ", ".join(f"L{n} {sum(t.task.difficulty == n for t in successes)}" for n in levels)
    print(f"{args.run}: {len(successes)} verified successes ({counts})")

    seen = {problem_key_of(env)(t.task.params) for t in experience}
    tasks = draw(env_ref, levels, [args.eval] * len(levels), args.seed + 4242, seen)

    agent, directory = load_agent(str(args.run / "agents" / args.agent))
    if args.compare is not None:
        name = args.compare or args.agent
        other, other_directory = load_agent(str(args.run / "agents" / name))
        own = other.adapter_path(other_directory)
        if own is None:
            raise SystemExit(f"agent {name} of {args.run} has no adapter to compare")
        print(f"{name} as the run trained it: {play(env, tasks, other, own, args.seed)}")
    lever: WeightLever = pairs_lever if args.pairs else rft
    # Each trainer reads its own knobs: DPO the beta and the two NLL weights, SFT the length
    # exponent.
    settings = lora_settings(
        lever,
        args.seed,
        length_exponent=args.length_exponent,
        chosen_nll_weight=args.chosen_nll_weight,
    )
    if not args.pairs:
        label = f"retrained: length exponent {args.length_exponent}"
        train_and_play(env, tasks, agent, args, label, settings, successes=successes)
        return
    start = agent.adapter_path(directory)
    pairs = unguided_pairs(env, experience, agent, start, args.pairs, args.seed)
    for beta, weight in itertools.product(args.beta, args.anchor_weight):
        if not (beta or weight or args.chosen_nll_weight):
            print(f"beta 0 without an NLL term trains nothing: {args.agent} as it is")
            continue
        label = (
            f"dpo from {args.agent}: {len(pairs)} pairs, beta {beta}, chosen NLL weight "
            f"{args.chosen_nll_weight}, anchor weight {weight}"
        )
        anchored = replace(settings, beta=beta, anchor_weight=weight)
        anchors = successes if weight else []
        train_and_play(env, tasks, agent, args, label, anchored, pairs, anchors, start)


def train_and_play(
    env: Env,
    tasks: list[Task],
    agent: Agent,
    args: argparse.Namespace,
    label: str,
    settings: LoraSettings,
    pairs: list[Preference] | None = None,
    successes: list[Trajectory] | None = None,
    start: Path | None = None,
) -> None:
    """Train one adapter (DPO on ``pairs`` if given, else SFT on ``successes``); play it."""
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "adapter"
        started = time.perf_counter()
        with progress_bars() as progress:
            if pairs is not None:
                result = LocalTrainer().dpo(pairs, out, settings, start, progress, successes or [])
            else:
                result = LocalTrainer().sft(successes or [], out, settings, progress)
        if result is None:
            raise SystemExit("nothing fit the training context")
        print(
            f"{label}, {result.examples} examples, {args.steps} steps, loss "
            f"{result.losses[0]:.3f} -> {result.losses[-1]:.3f}  "
            f"[{time.perf_counter() - started:.0f} s]"
        )
        trained = replace(agent, version="trained", adapter=str(out))
        print(f"trained: {play(env, tasks, trained, out, args.seed)}")


def unguided_pairs(
    env: Env, experience: list[Trajectory], agent: Agent, adapter: Path | None, k: int, seed: int
) -> list[Preference]:
    """DPO pairs of the run's episodes and ``k`` unguided samples of ``agent`` on their tasks."""
    real = [
        t
        for t in experience
        if t.agent == agent.version and t.error is None and not t.metadata.get("hindsight")
    ]
    if not real:
        raise SystemExit(f"agent {agent.version} played no training episode in this run")
    tasks = list({t.task.id: t.task for t in real}.values())
    model = make_model("local", adapter=None if adapter is None else str(adapter))
    own = rollout(env, tasks, agent, model, CPU_ROLLOUT, k=k, seed=seed, first_sample=1000)
    levels = sorted({t.task.difficulty for t in own})
    print(f"{agent.version} unguided on its {len(tasks)} training tasks: {rates(own, levels)}")
    pairs = mine_pairs(groups(real + own), PairsLever.max_pairs)
    if not pairs:
        raise SystemExit("no task had a success and a failure parting at one action")
    kinds = Counter(f"turn {p.turn}: {_tool(p.chosen)} over {_tool(p.rejected)}" for p in pairs)
    print(f"{len(pairs)} pairs: " + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common()))
    return pairs


def _tool(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls") or [{"function": {"name": "text"}}]
    return str(calls[0]["function"]["name"])


if __name__ == "__main__":
    main()
