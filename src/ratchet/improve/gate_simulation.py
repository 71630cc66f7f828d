"""The gate by simulation: how often a run accepts a candidate, for a setting of the gate.

Used by the gate's tests and measurements (``docs/lab/2026-12-01-gate-by-simulation.md``): a
run's false-accept rate when candidates are no better than the incumbent, and its power when
one is better by a given gain, with episodes reduced to what the gate reads.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.core.verdict import Verdict
from ratchet.improve.gate import (
    GateConfig,
    GateDecision,
    decide_round,
    retests,
    round_alpha,
    round_spent,
)


def simulate(
    config: GateConfig,
    *,
    probe_tasks: int,
    probe_k: int,
    levers: int,
    rounds: int,
    gain: float = 0.0,
    base: tuple[float, float] = (0.1, 0.9),
    trials: int = 200,
    seed: int = 0,
    coupled: bool = False,
    opened: float = 0.0,
) -> float:
    """Estimate how often a run accepts at least one candidate, by simulation.

    Each trial is a run of ``rounds`` rounds; each round draws a fresh probe (every task its
    own success rate, uniform in ``base``, capped so the gain fits), plays the incumbent and
    ``levers`` candidates on it, and lets the gate decide. With ``gain=0`` the candidates are
    exactly as good as the incumbent, so the result is the gate's false-accept rate per run;
    with ``gain > 0`` one candidate is that much better on every task: the gate's power.
    ``opened`` is the share of the probe at a level just opened: no agent passes those tasks
    but the better candidate, which passes each with chance ``gain`` and gains nowhere else.
    With ``coupled``, every agent plays a probe episode with the same random number (an
    episode passes if it falls below the agent's rate), as agents sharing sampling seeds do
    at best: a better candidate then never fails where the incumbent passed. Candidates that
    only their flips reject are retested as :func:`~ratchet.improve.gate.retests` says, on
    fresh random numbers (shared the same way).
    """
    rng = random.Random(seed)
    accepted_runs = 0
    for _ in range(trials):
        spent = 0.0
        for done in range(rounds):
            alpha = round_alpha(config, rounds, spent, done)
            new = round(opened * probe_tasks)
            top = base[1] if new else min(base[1], 1 - gain)
            rates = [rng.uniform(base[0], top) for _ in range(probe_tasks - new)] + [0.0] * new
            gains = [0.0] * (probe_tasks - new) + [gain] * new if new else [gain] * probe_tasks
            agents = {
                f"c{i}": [r + (g if i == 0 else 0) for r, g in zip(rates, gains, strict=True)]
                for i in range(levers)
            }
            decisions = _decided(config, rates, agents, probe_k, alpha, rng, coupled)
            spent += round_spent(alpha, [(d.p_value, d.threshold) for d in decisions])
            if any(d.accepted for d in decisions):
                accepted_runs += 1
                break
    return accepted_runs / trials


@dataclass(frozen=True)
class RunSimulation:
    """What simulated runs of a sequence of rounds accepted.

    Attributes:
        false_accepts: Share of runs that accepted a candidate no better than its incumbent.
        accepts_by_round: Per round, the share of runs that accepted a better candidate there.
    """

    false_accepts: float
    accepts_by_round: tuple[float, ...]


def simulate_rounds(
    config: GateConfig,
    *,
    probe_tasks: int,
    gains: Sequence[Sequence[float]],
    base: tuple[float, float] = (0.1, 0.9),
    trials: int = 200,
    seed: int = 0,
    coupled: bool = False,
    passes_on: bool = True,
) -> RunSimulation:
    """Simulate whole runs whose rounds hold candidates of given gains, one probe episode a task.

    ``gains`` holds each round's candidates' gains over the incumbent (one per lever; 0 is no
    better). Each round draws a fresh probe as :func:`simulate` does and the run goes on after
    an accept. With ``passes_on`` false every round spends its share of alpha, as the gate did
    before a round whose every candidate was significant passed its share on
    (:func:`~ratchet.improve.gate.round_spent`): the two measure what that rule buys and
    whether the false-accept bound holds with it.
    """
    rng = random.Random(seed)
    false_runs, accepts = 0, [0] * len(gains)
    for _ in range(trials):
        spent, false_accept = 0.0, False
        for done, round_gains in enumerate(gains):
            alpha = round_alpha(config, len(gains), spent, done)
            top = min(base[1], 1 - max(round_gains, default=0.0))
            rates = [rng.uniform(base[0], top) for _ in range(probe_tasks)]
            agents = {f"c{i}": [r + g for r in rates] for i, g in enumerate(round_gains)}
            decisions = _decided(config, rates, agents, 1, alpha, rng, coupled)
            tested = [(d.p_value, d.threshold) for d in decisions]
            spent += round_spent(alpha, tested) if passes_on else alpha
            kept = [round_gains[int(d.candidate[1:])] for d in decisions if d.accepted]
            false_accept = false_accept or 0.0 in kept
            accepts[done] += any(g > 0 for g in kept)
        false_runs += false_accept
    return RunSimulation(false_runs / trials, tuple(a / trials for a in accepts))


def _decided(
    config: GateConfig,
    rates: Sequence[float],
    agents: Mapping[str, Sequence[float]],
    probe_k: int,
    alpha: float,
    rng: random.Random,
    coupled: bool,
) -> list[GateDecision]:
    """One round's decisions on simulated episodes, after the retests the gate asks for."""
    incumbent, candidates = _play(rates, agents, probe_k, rng, coupled)
    decisions = decide_round(incumbent, candidates, config, alpha)
    if again := retests(decisions, config):
        replayed, retested = _play(rates, agents, config.retest_k, rng, coupled)
        replays = {v: (replayed, retested[v]) for v in again}
        decisions = decide_round(incumbent, candidates, config, alpha, replays)
    return decisions


def _play(
    rates: Sequence[float],
    agents: Mapping[str, Sequence[float]],
    k: int,
    rng: random.Random,
    coupled: bool,
) -> tuple[list[Trajectory], dict[str, list[Trajectory]]]:
    """The incumbent's (``rates``) and each candidate's simulated episodes, ``k`` per task."""
    shared = _uniforms(len(rates), k, rng)
    own = {v: shared if coupled else _uniforms(len(rates), k, rng) for v in agents}
    return _simulated(rates, shared), {v: _simulated(r, own[v]) for v, r in agents.items()}


def _uniforms(tasks: int, k: int, rng: random.Random) -> list[list[float]]:
    """One uniform number per probe episode (``k`` per task)."""
    return [[rng.random() for _ in range(k)] for _ in range(tasks)]


def _simulated(rates: Sequence[float], uniforms: Sequence[Sequence[float]]) -> list[Trajectory]:
    """Episodes with only what the gate reads: task id, sample and whether they passed."""
    return [
        Trajectory(
            task=Task(f"t{i}", "sim", "", "probe", problem=f"t{i}"),
            agent="sim",
            env_version="1",
            messages=(),
            sample=s,
            verdict=Verdict.of(u < rate),
        )
        for i, (rate, draws) in enumerate(zip(rates, uniforms, strict=True))
        for s, u in enumerate(draws)
    ]
