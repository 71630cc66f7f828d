"""The self-improvement loop behind ``ratchet improve``.

Each round: the curriculum picks training tasks; the incumbent plays them (k samples each, then
a search of the tasks no sample solved, see :mod:`ratchet.improve.explore`); hindsight relabels
what failed episodes did achieve; every lever proposes a candidate from the verified experience
so far; the gate compares all candidates with the incumbent on a fresh probe sample (same tasks,
same seeds), retesting the tasks a candidate lost where those losses alone would reject it, and
the best accepted one becomes the incumbent.
Base and final agents are measured on the held-out test split, which no decision ever sees.
All persistence lives in :class:`~ratchet.improve.rundir.RunDir`, so a run resumes anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.progress import Progress

from ratchet.core.env import Env
from ratchet.core.served import is_served
from ratchet.core.task import Split, Task
from ratchet.engine.cluster import RayPool
from ratchet.engine.models import Backends, Model, Trainer, make_trainer
from ratchet.improve import seeds
from ratchet.improve.config import ImproveConfig
from ratchet.improve.curriculum import CurriculumConfig, choose_tasks
from ratchet.improve.experience import verified_experience
from ratchet.improve.gate import (
    decide_round,
    probe_size,
    retests,
    round_alpha,
    unreachable,
    winner,
)
from ratchet.improve.hindsight import relabel_all, sources
from ratchet.improve.levers import WEIGHT_LEVERS, Lever, make_levers
from ratchet.improve.practice import Practice, Probe, draw
from ratchet.improve.rundir import RunDir
from ratchet.improve.schedule import alpha_shares, sitting_out
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
    trainer: Callable[[], Trainer | None] | None = None,
    pool: RayPool | None = None,
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
        trainer: Makes the adapter trainer for weight levers (default: from ``config.model``
            and ``config.weights``; a served model's server from ``OPENAI_BASE_URL``).
        pool: Ray env workers that play the episodes (``None``: here, on threads).

    Raises:
        ValueError: If ``out`` holds another run and ``resume`` is false, or holds no run (or
            one with other settings) and ``resume`` is true, or a lever name is unknown, or
            the probe is too small for the gate ever to accept (or larger than the env's
            probe split).
    """
    trainers = trainer or (lambda: weight_trainer(config))
    if levers is None:
        config = _trainable(config, trainers, log)
    levers = _levers(config, levers)
    _preflight(config, env, len(levers))
    with RunDir.open(out, config, resume=resume, log=log) as run:
        _check_alpha_left(run, len(levers))
        practice = Practice(run, env, backends, reflector, trainers, progress, pool)
        if config.experience is not None:
            _import_experience(run, config.experience, env, log)
        test = practice.test_tasks()
        base = practice.test(run.agent("base"), test)
        log(f"base test pass@1 {base.pass_at_1:.3f} ({base.n} tasks)")
        for number in range(run.rounds_done + 1, config.rounds + 1):
            record = _round(practice, levers, number, test, log)
            log(round_lines(run.end_round(record)))
        final = run.incumbent()
        if final.version not in run.tests:
            practice.test(final, test)
        return run.finish(summary(run, env))


def _round(
    practice: Practice, levers: Sequence[Lever], number: int, test: Sequence[Task], log: Log
) -> dict[str, Any]:
    """Play round ``number``: practise, propose, gate, adopt; return the round's record."""
    run, env, config = practice.run, practice.env, practice.config
    incumbent = run.incumbent()
    log(f"round {number}: incumbent {incumbent.version}")
    lap = _stopwatch()
    # Practise: explore the curriculum's tasks, then relabel what the failures achieved
    # up to the open levels (longer relabels teach a weak model to keep calling tools)
    # and trim the successes that acted on after reaching their goal.
    tasks, chosen = run.round_tasks(number, partial(_curriculum, run, env, number))
    explored = practice.explore(incumbent, tasks, number, log)
    open_to = chosen.get("open_to", config.max_difficulty)
    learned = relabel_all(env, explored.episodes, incumbent, open_to)
    run.record(learned.successes)
    phases: dict[str, Any] = {"practice": lap(), "proposals": {}}
    # Propose: every lever turns the experience so far into at most one candidate.
    candidates, lever_of = [], {}
    out = sitting_out(run.rounds, [lever.name for lever in levers])
    for lever in levers:
        propose = practice.proposal(lever, incumbent, number, out[lever.name])
        if (candidate := run.candidate(number, lever.name, incumbent, propose)) is not None:
            candidates.append(candidate)
            lever_of[candidate.version] = lever.name
        phases["proposals"][lever.name] = lap()
    # Gate: all candidates against the incumbent on this round's fresh probe sample, large
    # enough for a gain to show over what the incumbent passed of its earlier probes; Holm
    # splits alpha by the levers' records, and the probe is sized for the favoured one.
    alpha = round_alpha(config.gate, config.rounds, run.alpha_spent, run.rounds_done)
    if alpha > config.gate.alpha / config.rounds * (1 + 1e-9):
        log(f"  alpha {alpha:.4f}: rounds whose every candidate was significant passed theirs on")
    shares = alpha_shares(run.rounds, list(lever_of.values()))
    weights = {version: shares[lever] for version, lever in lever_of.items()}
    if len(set(weights.values())) > 1:
        total = sum(weights.values())
        split = ", ".join(f"{lever} {shares[lever] / total:.2f}" for lever in lever_of.values())
        log(f"  alpha {alpha:.4f} split by the levers' records: {split}")
    roots = explored.record["roots"]
    drawn = _draw_probe(practice, number, open_to, chosen, roots, alpha, weights, log)
    probe = drawn.tasks
    baseline = practice.probe(incumbent, probe)
    probed = {c.version: practice.probe(c, probe) for c in candidates}
    decisions = decide_round(baseline, probed, config.gate, alpha, weights=weights)
    # A candidate only its pass->fail flips reject replays the flipped tasks, as does
    # the incumbent: one sampled failure cannot tell a broken task from a noisy one.
    if again := retests(decisions, config.gate):
        by_version = {c.version: c for c in candidates}
        retested = {
            version: practice.retest(incumbent, by_version[version], probe, flipped)
            for version, flipped in again.items()
        }
        decisions = decide_round(baseline, probed, config.gate, alpha, retested, weights)
    run.adopt(number, incumbent, decisions)
    phases["gate"] = lap()
    best = winner(decisions)
    if best is not None and config.curve:
        practice.test(run.agent(best.candidate), test)
        phases["test"] = lap()
    record = round_record(number, incumbent, explored.episodes, learned, baseline, decisions, best)
    relabelled = sources([*explored.episodes, *learned.successes])
    record["exploration"] = explored.with_relabels(relabelled).record
    record["curriculum"] = {**chosen, "probe_to": practice.probe_top(open_to)}
    record["alpha"] = alpha
    record["alpha_shares"] = shares
    record["probe_size"] = len(probe)
    record["probe_reused"] = list(drawn.reused)
    record["seconds_by_phase"] = phases
    return record


def _draw_probe(
    practice: Practice,
    number: int,
    open_to: int,
    chosen: dict[str, Any],
    roots: Sequence[int],
    alpha: float,
    weights: dict[str, float],
    log: Log,
) -> Probe:
    """Draw round ``number``'s probe, sized for its best-weighted candidate, and say why.

    ``weights`` are the candidates' weights in Holm's split of ``alpha``; the probe is sized
    for the threshold of the heaviest (the lever whose record the split favours). ``roots``
    (passed, played) are the incumbent's unsteered samples of this round's practice, which
    stand for its earlier probes when it has none (round 1).
    """
    config, env = practice.config, practice.env
    first = max(weights.values(), default=1.0) / (sum(weights.values()) or 1.0)
    top = min(practice.probe_top(open_to), env.max_difficulty)
    mastery = chosen.get("probe", {})
    passes = _probe_pass(mastery, top, roots) if weights else None
    size = probe_size(config.probe_tasks, config.gate, alpha * first, passes)
    if size > config.probe_tasks and passes is not None:
        source = (
            "its earlier probes, 0 at a level just opened"
            if mastery
            else f"its practice samples, {roots[0]} of {roots[1]} passed"
        )
        log(
            f"  probe: {size} tasks, not {config.probe_tasks}: the incumbent is expected to "
            f"pass {passes:.0%} of it ({source}), and a candidate that solves "
            f"{config.gate.smallest_gain:g} of the rest needs this many to show"
        )
    drawn = practice.probe_tasks(number, open_to, size)
    if drawn.reused:
        log(
            f"  probe: {len(drawn.reused)} of {len(drawn.tasks)} tasks were probed in an "
            f"earlier round too (the probe split holds too few problems): {', '.join(drawn.reused)}"
        )
    return drawn


def _probe_pass(mastery: dict[str, float], top: int, roots: Sequence[int]) -> float | None:
    """The incumbent's expected pass rate on a probe of levels ``1..top`` (drawn evenly).

    ``mastery`` is its pass rate per level on its earlier probes, as the curriculum noted it
    when the round began (so a resumed round reads the same); a level it was never probed on
    (just opened) counts as 0. An incumbent never probed (the base, in round 1) is expected to
    pass as its unsteered practice samples of the round did (``roots``: passed, played), which
    were played before the probe was drawn: on files (dev seed 0) round 1's rft candidate
    solved 5 of the 24 probe tasks the base failed, broke nothing, and got p = 0.031 against
    0.0083. ``None``: nothing to go by.
    """
    if mastery:
        return sum(mastery.get(str(level), 0.0) for level in range(1, top + 1)) / top
    passed, played = roots
    return passed / played if played else None


def _stopwatch() -> Callable[[], float]:
    """A lap timer: each call returns the seconds since the last (or since it was made)."""
    mark = [time.perf_counter()]

    def lap() -> float:
        now = time.perf_counter()
        elapsed, mark[0] = now - mark[0], now
        return round(elapsed, 1)

    return lap


def _check_alpha_left(run: RunDir, candidates: int) -> None:
    """Refuse to resume a run whose rounds so far left its gate no alpha to accept with.

    :func:`_preflight` checked a fresh run against the whole alpha; a resumed one has only what
    its rounds so far left.
    """
    config = run.config
    if not 0 < run.rounds_done < config.rounds:
        return
    spent, done = run.alpha_spent, run.rounds_done
    problem = unreachable(config.gate, config.probe_tasks, config.rounds, candidates, spent, done)
    if problem is not None:
        raise ValueError(problem)


def _preflight(config: ImproveConfig, env: Env, candidates: int) -> None:
    """Refuse, before any work, a run whose gate cannot accept or whose tasks cannot be drawn."""
    problem = unreachable(config.gate, config.probe_tasks, config.rounds, candidates)
    if problem is not None:
        raise ValueError(problem)
    # The probe may cover level 1 alone (only it open) or every level; test covers them all.
    sizes: list[tuple[Split, int, int, int]] = [
        ("probe", config.probe_tasks, seeds.probe(config.seed), top)
        for top in sorted({1, config.max_difficulty})
    ]
    sizes.append(("test", config.test_tasks, seeds.test(config.seed), config.max_difficulty))
    for split, n, seed, top in sizes:
        try:
            draw(env, split, n, seed, top)
        except ValueError as exc:
            raise ValueError(f"cannot draw {n} {split} tasks: {exc}") from None


def _import_experience(run: RunDir, source: str, env: Env, log: Log) -> None:
    load = partial(verified_experience, Path(source), env.name)
    log(f"experience from {source}: {run.import_experience(source, load)} verified episodes")


def _trainable(
    config: ImproveConfig, trainers: Callable[[], Trainer | None], log: Log
) -> ImproveConfig:
    """``config`` without the weight levers if its model cannot be trained here (said once).

    A served model without its weights, or a scripted one, still improves through the levers
    that change only the prompt; the run records the levers it used.

    Raises:
        ValueError: If every lever named trains weights and the model cannot be trained.
    """
    weight_levers = [name for name in config.levers if name in WEIGHT_LEVERS]
    if not weight_levers or trainers() is not None:
        return config
    why = (
        f"{config.model!r} cannot be trained here (use --model local, or for a served model "
        "--weights PATH, its Hugging Face weights)"
    )
    kept = tuple(name for name in config.levers if name not in WEIGHT_LEVERS)
    if not kept:
        raise ValueError(f"no lever of {', '.join(config.levers)} can run: {why}")
    log(f"left out the weight lever(s) {', '.join(weight_levers)}: {why}")
    options = {lever: values for lever, values in config.lever_options.items() if lever in kept}
    return replace(config, levers=kept, lever_options=options)


def _levers(config: ImproveConfig, levers: Sequence[Lever] | None) -> list[Lever]:
    if levers is None:
        return make_levers(config.levers, config.lever_arguments())
    if tuple(lever.name for lever in levers) != config.levers:
        raise ValueError(f"config.levers {config.levers} does not name the levers given")
    return list(levers)


def _curriculum(run: RunDir, env: Env, number: int) -> tuple[list[Task], dict[str, Any]]:
    config = run.config
    curriculum = CurriculumConfig(max_difficulty=config.max_difficulty)
    seed = seeds.curriculum(config.seed, number)
    # Recorded conversations are experience but not tasks: the env has no world to replay them.
    history = [t for t in run.experience if not is_served(t.task)]
    incumbent = run.incumbent().version
    probe = run.probe_episodes(incumbent)
    choice = choose_tasks(
        env, history, config.train_tasks, seed, curriculum, probe, run.proposed_tasks, incumbent
    )
    return choice.tasks, choice.note


def weight_trainer(config: ImproveConfig, base_url: str | None = None) -> Trainer | None:
    """The weight levers' trainer for ``config``'s model, or ``None`` where it cannot be trained.

    Args:
        config: The run's settings (its ``model`` and ``weights``).
        base_url: A served model's server (default: ``OPENAI_BASE_URL``).
    """
    try:
        return make_trainer(config.model, config.weights, base_url)
    except ValueError:
        return None
