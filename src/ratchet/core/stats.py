"""Statistics every number in Ratchet goes through: intervals, paired tests, multiple testing.

- Pass rates get a Wilson score interval, which stays honest at 0/n and n/n (a percentile
  bootstrap collapses to ``[0, 0]`` there). With several samples per task the samples of one
  task are not independent, so the interval is a task-clustered bootstrap; where every task has
  the same outcome the bootstrap is degenerate too and the Wilson interval over tasks is used.
- Two agents on the same tasks are compared by paired per-task differences and a one-sided
  sign-flip permutation test (exact up to 16 non-zero differences).
- Several candidates tested on one probe are corrected with Holm's step-down procedure.
- A gain measured over several runs (seeds) gets a between-run interval: a Student t interval
  for the mean of the per-run gains. Pooling every run's test tasks into one Wilson interval
  treats the tasks as independent and leaves out how much one run differs from the next (its
  training draw, its sampling, the gate's decisions); the runs are the independent units.
"""

from __future__ import annotations

import functools
import math
import random
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

EXACT_MAX_TASKS = 16


@dataclass(frozen=True)
class Interval:
    """A confidence interval for a rate (or, from :func:`between_runs`, a mean gain).

    Attributes:
        low: Lower end.
        high: Upper end.
        method: How it was computed: ``wilson``, ``cluster-bootstrap``,
            ``wilson-over-tasks`` (clustered samples that all agree) or ``t-between-runs``.
        level: Confidence level, e.g. 0.95.
    """

    low: float
    high: float
    method: str
    level: float = 0.95


def wilson(passes: float, n: int, level: float = 0.95, method: str = "wilson") -> Interval:
    """Wilson score interval for ``passes`` successes out of ``n``.

    Raises:
        ValueError: If ``n`` is negative or ``passes`` is outside ``[0, n]``.
    """
    if n < 0 or not 0 <= passes <= max(n, 0):
        raise ValueError(f"wilson needs 0 <= passes <= n; got {passes} of {n}")
    if n == 0:
        return Interval(0.0, 1.0, method, level)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = passes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if passes == 0 else max(0.0, centre - spread)
    high = 1.0 if passes == n else min(1.0, centre + spread)
    return Interval(low, high, method, level)


def pass_rate_interval(
    outcomes: Sequence[Sequence[bool]], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Interval:
    """Interval for the mean per-task pass rate of ``outcomes`` (one list of samples per task).

    One sample per task: Wilson. Several: a bootstrap that resamples whole tasks, or the
    Wilson interval over tasks when every task's rate is the same 0 or 1.
    """
    groups = [list(g) for g in outcomes if g]
    if not groups:
        return Interval(0.0, 1.0, "wilson", level)
    if all(len(g) == 1 for g in groups):
        return wilson(sum(g[0] for g in groups), len(groups), level)
    rates = [sum(g) / len(g) for g in groups]
    if all(r == rates[0] for r in rates) and rates[0] in (0.0, 1.0):
        return wilson(rates[0] * len(rates), len(rates), level, "wilson-over-tasks")
    rng = random.Random(seed)
    n = len(rates)
    means = sorted(sum(rng.choices(rates, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    low, high = means[int(tail * resamples)], means[int((1 - tail) * resamples) - 1]
    return Interval(low, high, "cluster-bootstrap", level)


def between_runs(gains: Sequence[float], level: float = 0.95) -> Interval:
    """Student t interval for the mean of ``gains``, one per independent run (seed).

    ``mean ± t(level, n - 1) · sd / √n``, ``sd`` the sample standard deviation: wide with few
    runs (t is 4.30 for three), and as wide as the runs disagree.

    Raises:
        ValueError: With fewer than two gains (one run says nothing of the spread), or a
            non-finite one.
    """
    values = [float(g) for g in gains]
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"a between-run interval needs two or more finite gains; got {values}")
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = t_quantile(level, len(values) - 1) * sd / math.sqrt(len(values))
    return Interval(mean - half, mean + half, "t-between-runs", level)


def t_quantile(level: float, df: int) -> float:
    """The ``q`` with ``P(|T| <= q) = level`` for Student's t with ``df`` degrees of freedom.

    Bisection on the exact two-sided distribution function for whole ``df`` (Abramowitz and
    Stegun 26.7.3 and 26.7.4), to 1e-12.

    Raises:
        ValueError: If ``level`` is not in (0, 1) or ``df`` is below 1.
    """
    if not 0 < level < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0 < level < 1 and df >= 1; got {level}, {df}")
    low, high = 0.0, 1.0
    while _t_within(high, df) < level:
        high *= 2
    while high - low > 1e-12:
        middle = (low + high) / 2
        low, high = (middle, high) if _t_within(middle, df) < level else (low, middle)
    return (low + high) / 2


def _t_within(t: float, df: int) -> float:
    """``P(|T| <= t)`` for Student's t with whole ``df``."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    # The series 1 + a1 cos^2 + a2 cos^4 + ...: odd df weights 2/3, 2*4/(3*5), ...; even df
    # weights 1/2, 1*3/(2*4), ...
    start = 2 if df % 2 else 1
    term, total = 1.0, 1.0
    for k in range(start, df - 1, 2):
        term *= cos2 * k / (k + 1)
        total += term
    if df % 2 == 0:
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


Pair = tuple[str, int]


def paired_differences(
    before: Mapping[Pair, bool], after: Mapping[Pair, bool]
) -> dict[Hashable, float]:
    """Per-task mean difference ``after - before`` over episodes paired by ``(task, sample)``.

    Raises:
        ValueError: If the two do not cover the same, non-empty set of pairs.
    """
    if before.keys() != after.keys() or not before:
        raise ValueError("paired comparison needs both sides on the same, non-empty pairs")
    per_task: dict[Hashable, list[int]] = defaultdict(list)
    for key, passed in before.items():
        per_task[key[0]].append(int(after[key]) - int(passed))
    return {task: sum(d) / len(d) for task, d in per_task.items()}


def permutation_p_value(differences: Sequence[float], resamples: int, seed: int = 0) -> float:
    """One-sided p-value that the mean of paired ``differences`` is this large by chance.

    Under the null hypothesis each task's difference is as likely to have the opposite sign;
    flipping signs generates the null distribution, exactly by enumeration for up to
    :data:`EXACT_MAX_TASKS` non-zero differences, else by Monte Carlo with the conservative
    ``(1 + hits) / (1 + resamples)``.
    """
    values = np.abs(np.asarray([d for d in differences if d != 0], dtype=float))
    if values.size == 0:
        return 1.0
    observed = float(np.sum([d for d in differences if d != 0])) - 1e-12
    if values.size <= EXACT_MAX_TASKS:
        totals = _all_signs(values.size) @ values
        return float(np.mean(totals >= observed))
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(resamples, values.size))
    hits = int(np.sum(signs @ values >= observed))
    return (1 + hits) / (1 + resamples)


@functools.cache
def _all_signs(n: int) -> Any:
    """Every assignment of +1/-1 to ``n`` differences, one per row (cached: it is reused)."""
    bits = np.arange(2**n)[:, None] >> np.arange(n) & 1
    return (1 - 2 * bits).astype(np.float64)  # float: the product then runs in BLAS


def smallest_p_value(tasks: int) -> float:
    """The smallest p-value :func:`permutation_p_value` can give with ``tasks`` paired tasks."""
    return 0.5 ** min(tasks, 60) if tasks else 1.0


def holm(
    p_values: Sequence[float], alpha: float, weights: Sequence[float] | None = None
) -> list[tuple[bool, float]]:
    """Holm's step-down procedure at family-wise level ``alpha``, weighted if asked.

    Returns, per hypothesis, whether it is rejected and the threshold its p-value was held to;
    once one hypothesis is kept, every later one is kept too. Unweighted, the hypotheses are
    taken by p-value and the one of rank ``r`` is held to ``alpha / (m - r)``. With positive
    ``weights`` (Holm 1979's weighted procedure), they are taken by ``p / w`` and each is held
    to ``alpha * w / W``, ``W`` the weight of it and the hypotheses still untested; the bound
    holds for weights fixed before the p-values are seen, and equal weights give the
    unweighted procedure.

    Raises:
        ValueError: If ``weights`` is not one positive number per p-value.
    """
    shares = [1.0] * len(p_values) if weights is None else list(weights)
    if len(shares) != len(p_values) or any(w <= 0 for w in shares):
        raise ValueError(f"holm takes one positive weight per p-value, not {weights}")
    order = sorted(range(len(p_values)), key=lambda i: p_values[i] / shares[i])
    result = [(False, alpha)] * len(p_values)
    stopped = False
    for rank, index in enumerate(order):
        untested = sum(shares[i] for i in order[rank:])
        threshold = alpha * shares[index] / untested
        stopped = stopped or p_values[index] > threshold
        result[index] = (not stopped, threshold)
    return result
