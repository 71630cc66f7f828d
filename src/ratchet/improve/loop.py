"""The self-improvement loop behind ``ratchet improve``.

Each round: the curriculum picks training tasks; the incumbent plays them (exploring, k samples
each); hindsight relabels what failed episodes did achieve; every lever proposes a candidate
from the verified experience so far; the gate compares all candidates with the incumbent on a
fresh probe sample (same tasks, same seeds) and the best accepted one becomes the incumbent.
Base and final agents are measured on the held-out test split, which no decision ever sees.
All persistence lives in :class:`~ratchet.improve.rundir.RunDir`, so a run resumes anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from rich.progress import Progress

from ratchet.core.env import Env
from ratchet.core.stats import smallest_p_value
from ratchet.core.task import Task
from ratchet.engine.models import Backends, Model, Trainer, make_trainer
from ratchet.improve.config import ImproveConfig
from ratchet.improve.curriculum import CurriculumConfig, choose_tasks
from ratchet.improve.gate import decide_round, round_alpha, winner
from ratchet.improve.hindsight import relabel_all
from ratchet.improve.levers import Lever, make_levers
from ratchet.improve.practice import Practice
from ratchet.improve.rundir import RunDir
from ratchet.improve.summary import round_lines, round_record, summary

Log = Callable[[str], None]


def improve(
    config: ImproveConfig,
    env: Env,
    out: Path,
    backends: Backends,
    *,
    resume: bool = False,
    reflector: Model | None = None,
    progress: Progress | None = None,
    log: Log = print,
    levers: Sequence[Lever] | None = None,
) -> dict[str, Any]:
    """Run the self-improvement loop and return (and write) ``summary.json``'s content.

    Args:
        config: Run settings.
        env: The env to practise in.
        out: The run directory.
        backends: Builds the model backend of an agent (given its directory).
        resume: Continue the run in ``out`` instead of starting a new one.
        reflector: The reflector for levers that need one (default: each agent's own backend).
        progress: Progress display for rollouts and training, or ``None``.
        log: Where to report what happens, one line at a time.
        levers: Lever objects to use instead of the built-in ones ``config.levers`` names
            (their names must match ``config.levers``); how custom levers join the loop.

    Raises:
        ValueError: If ``out`` holds another run and ``resume`` is false, or holds no run (or
            one with other settings) and ``resume`` is true, or a lever name is unknown.
    """
    levers = _levers(config, levers)
    _check_gate_can_accept(config, len(levers))
    with RunDir.open(out, config, resume=resume, log=log) as run:
        practice = Practice(run, env, backends, reflector, lambda: _trainer(config), progress)
        test = practice.test_tasks()
        base = practice.test(run.agent("base"), test)
        log(f"base test pass@1 {base.pass_at_1:.3f} ({base.n} tasks)")
        for number in range(run.rounds_done + 1, config.rounds + 1):
            incumbent = run.incumbent()
            log(f"round {number}: incumbent {incumbent.version}")
            # Practise: explore the curriculum's tasks, then relabel what the failures achieved.
            tasks = run.round_tasks(number, partial(_curriculum, run, env, number))
            explored = practice.explore(incumbent, tasks, number)
            learned = relabel_all(env, explored, incumbent, config.max_difficulty)
            run.record(learned.successes)
            # Propose: every lever turns the experience so far into at most one candidate.
            candidates = []
            for lever in levers:
                propose = practice.proposal(lever, incumbent, number)
                if (candidate := run.candidate(number, lever.name, incumbent, propose)) is not None:
                    candidates.append(candidate)
            # Gate: all candidates against the incumbent on this round's fresh probe sample.
            probe = practice.probe_tasks(number)
            baseline = practice.probe(incumbent, probe)
            probed = {c.version: practice.probe(c, probe) for c in candidates}
            alpha = round_alpha(config.gate, config.rounds)
            decisions = decide_round(baseline, probed, config.gate, alpha)
            run.adopt(number, incumbent, decisions)
            best = winner(decisions)
            if best is not None and config.curve:
                practice.test(run.agent(best.candidate), test)
            record = round_record(number, incumbent, explored, learned, baseline, decisions, best)
            log(round_lines(run.end_round(record)))
        final = run.incumbent()
        if final.version not in run.tests:
            practice.test(final, test)
        return run.finish(summary(run, env))


def _check_gate_can_accept(config: ImproveConfig, levers: int) -> None:
    """Refuse settings under which the gate could never accept anything, before any work."""
    threshold = round_alpha(config.gate, config.rounds) / max(1, levers)
    smallest = smallest_p_value(config.probe_tasks)
    if smallest > threshold:
        needed = math.ceil(math.log2(1 / threshold))
        raise ValueError(
            f"with {config.probe_tasks} probe tasks the gate can never accept a candidate: the "
            f"smallest p-value they allow is {smallest:.4f}, above the best-case threshold "
            f"{threshold:.4f} (alpha {config.gate.alpha} over {config.rounds} rounds and "
            f"{levers} levers); use at least {needed} probe tasks, or fewer rounds or levers"
        )


def _levers(config: ImproveConfig, levers: Sequence[Lever] | None) -> list[Lever]:
    if levers is None:
        return make_levers(config.levers, {"rft": {"steps": config.train_steps}})
    if tuple(lever.name for lever in levers) != config.levers:
        raise ValueError(f"config.levers {config.levers} does not name the levers given")
    return list(levers)


def _curriculum(run: RunDir, env: Env, number: int) -> list[Task]:
    config = run.config
    curriculum = CurriculumConfig(max_difficulty=config.max_difficulty)
    seed = config.seed * 7919 + number
    return choose_tasks(
        env, run.experience, config.train_tasks, seed, curriculum, proposed=run.proposed_tasks
    )


def _trainer(config: ImproveConfig) -> Trainer | None:
    try:
        return make_trainer(config.model)
    except ValueError:
        return None
