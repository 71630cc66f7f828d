"""The gate: keep a candidate only if it beats the incumbent on the same probe tasks.

Candidates and the incumbent play the same probe tasks with the same sampling seeds, so their
episodes pair up by ``(task, sample)``. The statistic is the mean per-task difference in
success rate; its one-sided p-value comes from a paired sign-flip permutation test
(:mod:`ratchet.core.stats`), which assumes nothing about the shape of the differences.

Error control. ``alpha`` bounds the chance that a run accepts *any* candidate that is no better
than its incumbent. Each of the run's rounds draws a fresh probe sample from the probe split (so
no probe set is reused after the loop has adapted to it) and may spend an even share of what
earlier rounds left of ``alpha`` (``alpha / rounds`` while none is left over); within a round,
the candidates of all levers are tested against the one probe with Holm's step-down procedure. A
round whose every tested candidate was significant spends nothing and passes its share on
(:func:`round_spent`). A candidate must also gain on the probe and keep its pass-to-fail flips
within ``flip_budget``; among the accepted candidates of a round the largest gain wins. A
round's probe grows until a candidate worth keeping would show its gain (:func:`probe_size`):
where the incumbent passed so much of its earlier probes that little is left to gain on, and
where a level has just opened and a candidate solves only some of its tasks. The size comes from
what was measured before the probe was drawn (earlier probes, or in round 1 the base's practice
samples), so the bound holds.
:mod:`ratchet.improve.gate_simulation` measures the gate on simulated runs.

Per env. When the probe holds tasks of several envs (a suite), the flip budget holds within
each env and within each level of each env too: a gain on one env cannot pay for what the
candidate broke on another (:mod:`ratchet.improve.probe_groups`). Each decision reports its
groups; a single env's probe reports its levels and keeps the one budget.

Confirmed regressions. One sampled episode per task cannot tell a task the candidate broke
from one the incumbent passes half the time: at probe temperature a much better candidate
still fails a few such tasks by chance. So a candidate that only its flips would reject gets a
retest (:func:`retests`): it and the incumbent play each flipped task ``retest_k`` more times
with shared seeds (samples numbered from :data:`RETEST_FIRST_SAMPLE`, apart from the probe's
own), and a flip counts against the budget only if the candidate then passes that task fewer
times than the incumbent. The retest can only turn a rejection into an acceptance for a
candidate whose gain is already significant, so it leaves the false-accept bound as it was.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratchet.core.stats import holm, paired_differences, permutation_p_value, smallest_p_value
from ratchet.core.trajectory import Trajectory
from ratchet.improve.probe_groups import (
    Group,
    Key,
    group_outcome,
    pass_to_fail,
    probe_groups,
)

# Its old home, kept importable: decisions carry it (GateDecision.groups).
from ratchet.improve.probe_groups import GroupOutcome as GroupOutcome


@dataclass(frozen=True)
class GateConfig:
    """When to accept a candidate.

    Attributes:
        alpha: Largest chance that a run accepts a candidate no better than its incumbent,
            shared equally by the rounds and split among a round's candidates by Holm.
        flip_budget: Largest share of the paired probe episodes that may turn from pass to fail
            in an accepted candidate (one flip is always tolerated).
        retest_k: Fresh paired samples of each flipped task when flips alone would reject a
            candidate (0: every flip counts).
        resamples: Monte-Carlo sign flips when there are too many tasks to enumerate.
        probe_growth: Largest multiple of --probe-tasks a round's probe grows to where a gain
            of ``smallest_gain`` could not show on fewer tasks (1: never grows).
        smallest_gain: Share of the probe tasks its incumbent fails that a candidate worth
            keeping solves; the probe is sized for such a candidate to show, 4 times in 5.
    """

    alpha: float = 0.05
    flip_budget: float = 0.1
    retest_k: int = 4
    resamples: int = 20_000
    probe_growth: float = 3.0
    smallest_gain: float = 0.3

    def __post_init__(self) -> None:
        """Refuse a probe that would shrink and a gain no probe could be sized for.

        Raises:
            ValueError: If ``probe_growth`` is below 1 or ``smallest_gain`` outside (0, 1].
        """
        if self.probe_growth < 1:
            raise ValueError(f"gate probe_growth is at least 1, not {self.probe_growth}")
        if not 0 < self.smallest_gain <= 1:
            raise ValueError(f"gate smallest_gain is in (0, 1], not {self.smallest_gain}")


PROBE_POWER = 0.8
"""The chance a probe is sized to give a candidate of ``smallest_gain`` to reach its threshold."""


RETEST_FIRST_SAMPLE = 1_000
"""Sample number of a retest's first episode of a task: above any probe sample, so retest
episodes get seeds of their own and never count as probe episodes."""

Retest = tuple[Sequence[Trajectory], Sequence[Trajectory]]
"""The incumbent's and a candidate's retest episodes on the candidate's flipped tasks."""


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
        flipped: Probe tasks with a pass->fail flip, by id.
        confirmed_flips: Flips a retest confirmed (``None``: no retest was played).
        groups: The probe per env and per level of each env (a suite), or per level (a single
            env over several levels); empty for a probe of one env at one level.
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
    flipped: tuple[str, ...] = ()
    confirmed_flips: int | None = None
    groups: tuple[GroupOutcome, ...] = ()

    @property
    def flips_reject(self) -> bool:
        """Whether its sampled flips break the whole probe's budget or a guarded group's."""
        return self.flips_pass_to_fail > self.flip_limit or any(
            g.guarded and g.flips_pass_to_fail > g.flip_limit for g in self.groups
        )


def round_alpha(config: GateConfig, rounds: int, spent: float = 0.0, done: int = 0) -> float:
    """The share of ``alpha`` the next of ``rounds`` rounds may spend.

    What the ``done`` rounds so far left of ``alpha`` (they spent ``spent``) is split evenly
    over the rounds still to run. A run that keeps the rounds it planned gives each round
    ``alpha / rounds`` and more once a round passed its share on (:func:`round_spent`); a run
    resumed with more rounds splits only what is left, so the false
    accepts of the whole run stay bounded by ``alpha``.
    """
    return max(0.0, config.alpha - spent) / max(1, rounds - done)


def spent_alpha(record: Mapping[str, Any]) -> float:
    """The share of ``alpha`` a completed round spent, from its record (:func:`round_spent`).

    Rounds record their alpha as ``alpha``; older records did not, and their largest Holm
    threshold among the tested candidates is the round's alpha.
    """
    tested = [
        (float(c["p_value"]), float(c["threshold"]))
        for c in record.get("candidates", ())
        if "threshold" in c and "p_value" in c
    ]
    alpha = record.get("alpha", max((threshold for _, threshold in tested), default=0.0))
    return round_spent(float(alpha), tested)


def round_spent(alpha: float, tested: Iterable[tuple[float, float]]) -> float:
    """What a round held to ``alpha`` spent, given its tested candidates' p-values and thresholds.

    A false accept needs a candidate no better than the incumbent to be significant. In a round
    whose every tested candidate was significant (or that tested none), either one of them was
    such a false accept already, or none was no better and the round could not make one: it
    spends nothing, and its alpha passes on to the rounds left. Along any run the rounds that
    spend add up to at most ``alpha``, and each round's probe is fresh, so a run's chance of any
    false accept stays at most ``alpha`` (the sequential form of the graphical procedure's
    fallback, Bretz et al. 2009: a rejected hypothesis passes its alpha on).
    """
    return 0.0 if all(p_value <= threshold for p_value, threshold in tested) else alpha


def unreachable(
    config: GateConfig,
    probe_tasks: int,
    rounds: int,
    candidates: int,
    spent: float = 0.0,
    done: int = 0,
) -> str | None:
    """Say why the gate could never accept anything with this probe size, or ``None``.

    The best candidate of a round is held to its round's alpha (:func:`round_alpha`) over
    ``candidates`` (Holm's first threshold), and a paired permutation test on ``probe_tasks``
    tasks cannot give a p-value below ``0.5 ** probe_tasks``; if that is above the threshold,
    a run can only waste its time. ``spent`` and ``done`` are a resumed run's rounds so far.
    """
    threshold = round_alpha(config, rounds, spent, done) / max(1, candidates)
    if threshold <= 0:
        return (
            f"the gate can never accept a candidate: the run's {done} rounds so far spent all "
            f"of alpha {config.alpha:g}, so rounds added on resume have none left to spend; "
            f"start a new run (another --out) with --rounds {rounds}"
        )
    smallest = smallest_p_value(probe_tasks)
    if smallest <= threshold:
        return None
    needed = _fewest_differing(threshold)
    if done == 0:
        share = f"alpha {config.alpha:g} over {rounds} rounds"
    else:
        share = f"the alpha {config.alpha - spent:.4g} its {done} rounds so far left, over "
        share += f"{rounds - done} rounds"
    return (
        f"the gate can never accept a candidate: with {probe_tasks} probe tasks the smallest "
        f"reachable p-value is {smallest:.4g}, above the {threshold:.4g} the best candidate "
        f"must reach ({share} and {candidates} levers); use at least {needed} probe tasks"
    )


def probe_size(
    probe_tasks: int, config: GateConfig, threshold: float, incumbent_pass: float | None
) -> int:
    """How many probe tasks a round draws, so that a gain worth keeping can show.

    The paired test on ``m`` tasks that differ cannot reach a p-value below ``0.5 ** m``, and a
    candidate gains only on tasks the incumbent fails: an incumbent expected to pass share ``p``
    of the probe leaves about ``(1 - p) n`` of ``n`` tasks to gain on. A candidate that solves
    share ``config.smallest_gain`` of those and breaks nothing differs on a binomial number of
    them; the probe takes enough tasks for that number to reach the fewest ``threshold`` needs
    with chance :data:`PROBE_POWER`, between ``probe_tasks`` and ``config.probe_growth`` times
    it. Measured: on grid (level 1) an incumbent at 19 of 24 left 5 tasks, so no candidate could
    reach the round's 0.0167; and where level 2 had just opened (the incumbent at 0 there), rft
    candidates that solved 2 or 3 of its 12 probe tasks and broke nothing got p = 0.031 and
    0.0625 against a threshold of 0.0083.

    Args:
        probe_tasks: The run's probe size, the least a round draws.
        config: The gate's settings (``probe_growth``, ``smallest_gain``).
        threshold: The p-value the round's best candidate must reach (Holm's first).
        incumbent_pass: The incumbent's expected pass rate on this probe, from its earlier
            probes, a level it was never probed on counting as 0, or from its practice
            samples when it was never probed (``None``: nothing to go by).
    """
    most = max(probe_tasks, math.floor(probe_tasks * config.probe_growth))
    if incumbent_pass is None or threshold <= 0 or most == probe_tasks:
        return probe_tasks
    room = 1.0 - incumbent_pass
    if room <= 0:
        return most
    needed = _fewest_differing(threshold)
    failed = _failed_to_show(needed, config.smallest_gain, math.ceil(most * room))
    return max(probe_tasks, min(most, math.ceil(round(failed / room, 6))))


def _failed_to_show(needed: int, gain: float, limit: int) -> int:
    """The fewest failed tasks on which solving share ``gain`` gives ``needed`` wins, likely.

    The smallest ``m`` with ``P(Binomial(m, gain) >= needed) >= PROBE_POWER``, or ``limit``
    (the most a probe can fail) if that is smaller.
    """
    failed = needed
    while failed < limit and _at_least(needed, failed, gain) < PROBE_POWER:
        failed += 1
    return failed


def _at_least(wins: int, trials: int, chance: float) -> float:
    """``P(Binomial(trials, chance) >= wins)``."""
    return 1.0 - sum(
        math.comb(trials, k) * chance**k * (1 - chance) ** (trials - k) for k in range(wins)
    )


def _fewest_differing(threshold: float) -> int:
    """The fewest tasks that differ on which the paired test can reach ``threshold`` (> 0)."""
    return max(1, math.ceil(math.log2(1 / threshold)))


def decide_round(
    incumbent: Sequence[Trajectory],
    candidates: Mapping[str, Sequence[Trajectory]],
    config: GateConfig,
    alpha: float,
    retested: Mapping[str, Retest] | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[GateDecision]:
    """Decide every candidate of one round against the incumbent on one probe.

    Args:
        incumbent: The incumbent's probe episodes.
        candidates: Each candidate's probe episodes on the same ``(task, sample)`` pairs.
        config: Flip budget and resampling.
        alpha: This round's false-accept budget, shared among the candidates by Holm.
        retested: Retest episodes of the candidates :func:`retests` named, by version; their
            flips count only where the retest confirms them.
        weights: Each candidate's weight in Holm's split of ``alpha``, by version, fixed
            before the probe (none: equal shares).

    Raises:
        ValueError: If a candidate's episodes do not pair up with the incumbent's.
    """
    before = _outcomes(incumbent)
    groups = probe_groups({t.task.id: t.task for t in incumbent}, before)
    afters = {version: _outcomes(played) for version, played in candidates.items()}
    p_values = [
        permutation_p_value(list(paired_differences(before, after).values()), config.resamples)
        for after in afters.values()
    ]
    shares = None if weights is None else [weights[version] for version in afters]
    tested = holm(p_values, alpha, shares)
    retested = retested or {}
    return [
        _decide(
            version,
            before,
            after,
            (p_value, significant, threshold),
            config,
            groups,
            retested.get(version),
        )
        for (version, after), p_value, (significant, threshold) in zip(
            afters.items(), p_values, tested, strict=True
        )
    ]


def retests(decisions: Sequence[GateDecision], config: GateConfig) -> dict[str, tuple[str, ...]]:
    """The flipped tasks to retest, by candidate: those that only their flips rejected."""
    if config.retest_k < 1:
        return {}
    return {
        d.candidate: d.flipped
        for d in decisions
        if d.confirmed_flips is None
        and d.probe_gain > 0
        and d.p_value <= d.threshold
        and d.flips_reject
    }


def confirmed(flipped: Sequence[str], retest: Retest) -> set[str]:
    """The ``flipped`` tasks the candidate passed fewer times than the incumbent on retest."""
    incumbent, candidate = (Counter(t.task.id for t in played if t.passed) for played in retest)
    return {task for task in flipped if candidate[task] < incumbent[task]}


def is_retest(episode: Trajectory) -> bool:
    """Whether ``episode`` is a retest episode rather than one of the probe's own."""
    return episode.sample >= RETEST_FIRST_SAMPLE


def winner(decisions: Sequence[GateDecision]) -> GateDecision | None:
    """The accepted decision with the largest probe gain, if any."""
    accepted = [d for d in decisions if d.accepted]
    return max(accepted, key=lambda d: (d.probe_gain, -d.p_value)) if accepted else None


def _outcomes(episodes: Sequence[Trajectory]) -> dict[Key, bool]:
    return {(t.task.id, t.sample): t.passed for t in episodes}


def _decide(
    version: str,
    before: Mapping[Key, bool],
    after: Mapping[Key, bool],
    tested: tuple[float, bool, float],
    config: GateConfig,
    groups: Sequence[Group],
    retest: Retest | None,
) -> GateDecision:
    p_value, significant, threshold = tested
    tasks = len({key[0] for key in before})
    flipped = tuple(dict.fromkeys(task for task, _ in pass_to_fail(before, after, before)))
    broken = None if retest is None else confirmed(flipped, retest)
    # The whole probe is one more group, whose flip budget always holds.
    probe = group_outcome(
        ("probe", frozenset(before), True), before, after, broken, config.flip_budget
    )
    outcomes = tuple(
        group_outcome(group, before, after, broken, config.flip_budget) for group in groups
    )
    incumbent_pass, candidate_pass = probe.incumbent_pass, probe.candidate_pass
    gain = candidate_pass - incumbent_pass
    regressions, limit = probe.flips_pass_to_fail, probe.flip_limit
    confirmed_flips = probe.confirmed_flips
    retest_note = (
        ""
        if confirmed_flips is None
        else f", {confirmed_flips} confirmed by a retest of {config.retest_k} samples"
    )
    accepted = False
    if gain <= 0:
        reason = f"no gain on the probe ({gain:+.3f})"
    elif not significant:
        reason = f"gain {gain:+.3f} not significant (p={p_value:.4f} > {threshold:.4f})"
        if smallest_p_value(tasks) > threshold:
            reason += f"; {tasks} probe tasks can never reach it"
    elif probe.over_budget:
        reason = f"{regressions} pass->fail flips{retest_note} exceed the budget {limit}"
    elif broke := next((g for g in outcomes if g.over_budget), None):
        note = "" if broke.confirmed_flips is None else f", {broke.confirmed_flips} confirmed"
        reason = (
            f"{broke.flips_pass_to_fail} pass->fail flips on {broke.group}{note} exceed its "
            f"budget {broke.flip_limit} ({broke.incumbent_pass:.3f} -> "
            f"{broke.candidate_pass:.3f} there), whatever the gain {gain:+.3f} overall"
        )
    else:
        accepted = True
        reason = (
            f"gain {gain:+.3f} (p={p_value:.4f} <= {threshold:.4f}), "
            f"{regressions} pass->fail flips{retest_note}"
        )
    return GateDecision(
        candidate=version,
        accepted=accepted,
        probe_gain=gain,
        p_value=p_value,
        threshold=threshold,
        flips_pass_to_fail=regressions,
        flips_fail_to_pass=sum(after[k] and not before[k] for k in before),
        flip_limit=limit,
        incumbent_pass=incumbent_pass,
        candidate_pass=candidate_pass,
        tasks=tasks,
        samples=len(before) // tasks,
        reason=reason,
        flipped=flipped,
        confirmed_flips=confirmed_flips,
        groups=outcomes,
    )
