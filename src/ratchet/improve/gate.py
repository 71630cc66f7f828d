"""The gate: keep a candidate only if it beats the incumbent on the same probe tasks.

Candidates and the incumbent play the same probe tasks with the same sampling seeds, so their
episodes pair up by ``(task, sample)``. The statistic is the mean per-task difference in
success rate; its one-sided p-value comes from a paired sign-flip permutation test
(:mod:`ratchet.core.stats`), which assumes nothing about the shape of the differences.

Error control. ``alpha`` bounds the chance that a run accepts *any* candidate that is no better
than its incumbent. Each of the run's rounds draws a fresh probe sample from the probe split
(so no probe set is reused after the loop has adapted to it) and spends ``alpha / rounds``;
within a round, the candidates of all levers are tested against the one probe with Holm's
step-down procedure. A candidate must also gain on the probe and keep its pass-to-fail flips
within ``flip_budget``; among the accepted candidates of a round the largest gain wins.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ratchet.core.stats import holm, paired_differences, permutation_p_value, smallest_p_value
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.core.verdict import Verdict


@dataclass(frozen=True)
class GateConfig:
    """When to accept a candidate.

    Attributes:
        alpha: Largest chance that a whole run accepts a candidate no better than its
            incumbent; each round spends an equal share, split among its candidates by Holm.
        flip_budget: Largest share of the paired probe episodes that may turn from pass to fail
            in an accepted candidate; one such flip is always tolerated, since a single sampled
            failure is indistinguishable from noise.
        resamples: Monte-Carlo sign flips when there are too many tasks to enumerate.
    """

    alpha: float = 0.05
    flip_budget: float = 0.1
    resamples: int = 20_000


@dataclass(frozen=True)
class GateDecision:
    """A gate decision with the numbers behind it.

    Attributes:
        candidate: The candidate's version id.
        accepted: Whether the candidate passed the gate (the round's best accepted one wins).
        probe_gain: Candidate minus incumbent probe pass@1.
        p_value: One-sided p-value of the paired permutation test.
        threshold: The p-value this candidate needed (Holm's share of the round's alpha).
        flips_pass_to_fail: Paired episodes the incumbent passed and the candidate failed.
        flips_fail_to_pass: Paired episodes the incumbent failed and the candidate passed.
        flip_limit: The most pass->fail flips the budget allowed.
        incumbent_pass: Incumbent probe pass@1.
        candidate_pass: Candidate probe pass@1.
        tasks: Probe tasks compared.
        samples: Samples per task.
        reason: One sentence saying why it was accepted or rejected.
    """

    candidate: str
    accepted: bool
    probe_gain: float
    p_value: float
    threshold: float
    flips_pass_to_fail: int
    flips_fail_to_pass: int
    flip_limit: int
    incumbent_pass: float
    candidate_pass: float
    tasks: int
    samples: int
    reason: str


def round_alpha(config: GateConfig, rounds: int) -> float:
    """The share of ``alpha`` each of ``rounds`` rounds may spend."""
    return config.alpha / max(1, rounds)


def unreachable(config: GateConfig, probe_tasks: int, rounds: int, candidates: int) -> str | None:
    """Say why the gate could never accept anything with this probe size, or ``None``.

    The best candidate of a round is held to ``alpha / rounds / candidates`` (Holm's first
    threshold), and a paired permutation test on ``probe_tasks`` tasks cannot give a p-value
    below ``0.5 ** probe_tasks``; if that is above the threshold, a run can only waste its time.
    """
    threshold = round_alpha(config, rounds) / max(1, candidates)
    smallest = smallest_p_value(probe_tasks)
    if smallest <= threshold:
        return None
    needed = math.ceil(math.log2(1 / threshold))
    return (
        f"the gate can never accept a candidate: with {probe_tasks} probe tasks the smallest "
        f"reachable p-value is {smallest:.4g}, above the {threshold:.4g} the best candidate "
        f"must reach (alpha {config.alpha:g} over {rounds} rounds and {candidates} levers); "
        f"use at least {needed} probe tasks"
    )


def decide_round(
    incumbent: Sequence[Trajectory],
    candidates: Mapping[str, Sequence[Trajectory]],
    config: GateConfig,
    alpha: float,
) -> list[GateDecision]:
    """Decide every candidate of one round against the incumbent on one probe.

    Args:
        incumbent: The incumbent's probe episodes.
        candidates: Each candidate's probe episodes on the same ``(task, sample)`` pairs.
        config: Flip budget and resampling.
        alpha: This round's false-accept budget, shared among the candidates by Holm.

    Raises:
        ValueError: If a candidate's episodes do not pair up with the incumbent's.
    """
    before = _outcomes(incumbent)
    afters = {version: _outcomes(played) for version, played in candidates.items()}
    p_values = [
        permutation_p_value(list(paired_differences(before, after).values()), config.resamples)
        for after in afters.values()
    ]
    tested = holm(p_values, alpha)
    return [
        _decide(version, before, after, p_value, significant, threshold, config)
        for (version, after), p_value, (significant, threshold) in zip(
            afters.items(), p_values, tested, strict=True
        )
    ]


def winner(decisions: Sequence[GateDecision]) -> GateDecision | None:
    """The accepted decision with the largest probe gain, if any."""
    accepted = [d for d in decisions if d.accepted]
    return max(accepted, key=lambda d: (d.probe_gain, -d.p_value)) if accepted else None


def _outcomes(episodes: Sequence[Trajectory]) -> dict[tuple[str, int], bool]:
    return {(t.task.id, t.sample): t.passed for t in episodes}


def _decide(
    version: str,
    before: Mapping[tuple[str, int], bool],
    after: Mapping[tuple[str, int], bool],
    p_value: float,
    significant: bool,
    threshold: float,
    config: GateConfig,
) -> GateDecision:
    incumbent_pass = sum(before.values()) / len(before)
    candidate_pass = sum(after.values()) / len(after)
    gain = candidate_pass - incumbent_pass
    tasks = len({key[0] for key in before})
    regressions = sum(before[k] and not after[k] for k in before)
    flip_limit = max(1, int(config.flip_budget * len(before)))
    accepted = False
    if gain <= 0:
        reason = f"no gain on the probe ({gain:+.3f})"
    elif not significant:
        reason = f"gain {gain:+.3f} not significant (p={p_value:.4f} > {threshold:.4f})"
        if smallest_p_value(tasks) > threshold:
            reason += f"; {tasks} probe tasks can never reach it"
    elif regressions > flip_limit:
        reason = f"{regressions} pass->fail flips exceed the budget {flip_limit}"
    else:
        accepted = True
        reason = f"gain {gain:+.3f} (p={p_value:.4f} <= {threshold:.4f}), {regressions} regressions"
    return GateDecision(
        candidate=version,
        accepted=accepted,
        probe_gain=gain,
        p_value=p_value,
        threshold=threshold,
        flips_pass_to_fail=regressions,
        flips_fail_to_pass=sum(after[k] and not before[k] for k in before),
        flip_limit=flip_limit,
        incumbent_pass=incumbent_pass,
        candidate_pass=candidate_pass,
        tasks=tasks,
        samples=len(before) // tasks,
        reason=reason,
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
) -> float:
    """Estimate how often a run accepts at least one candidate, by simulation.

    Each trial is a run of ``rounds`` rounds; each round draws a fresh probe (every task its
    own success rate, uniform in ``base``, capped so the gain fits), plays the incumbent and
    ``levers`` candidates on it, and lets the gate decide. With ``gain=0`` the candidates are
    exactly as good as the incumbent, so the result is the gate's false-accept rate per run;
    with ``gain > 0`` one candidate is that much better on every task: the gate's power.
    With ``coupled``, every agent plays a probe episode with the same random number (an
    episode passes if it falls below the agent's rate), as agents sharing sampling seeds do
    at best: a better candidate then never fails where the incumbent passed.
    """
    rng = random.Random(seed)
    alpha = round_alpha(config, rounds)
    accepted_runs = 0
    for _ in range(trials):
        for _ in range(rounds):
            rates = [rng.uniform(base[0], min(base[1], 1 - gain)) for _ in range(probe_tasks)]
            shared = _uniforms(probe_tasks, probe_k, rng)
            incumbent = _simulated(rates, shared)
            candidates = {
                f"c{i}": _simulated(
                    [r + (gain if i == 0 else 0) for r in rates],
                    shared if coupled else _uniforms(probe_tasks, probe_k, rng),
                )
                for i in range(levers)
            }
            if any(d.accepted for d in decide_round(incumbent, candidates, config, alpha)):
                accepted_runs += 1
                break
    return accepted_runs / trials


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
