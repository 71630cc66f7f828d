"""The gate: keep a candidate only if it beats the incumbent on the same probe tasks.

Candidate and incumbent play the same probe tasks with the same sampling seeds, so their
episodes pair up by ``(task, sample)``. The statistic is the mean per-task difference in success
rate; its one-sided p-value comes from a paired sign-flip permutation test: under the null
hypothesis that the candidate is no better, each task's difference is as likely to have the
opposite sign, so flipping signs at random generates the null distribution. The test makes no
normality assumption (success rates of a few tasks are far from normal), stays valid for any
number of samples per task, and is exact by enumeration for up to 16 non-zero differences.
The Monte-Carlo p-value ``(1 + hits) / (1 + resamples)`` never understates the exact one, so the
chance of accepting a candidate that is no better is at most ``alpha``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ratchet.trajectory import Trajectory

EXACT_MAX_TASKS = 16


@dataclass(frozen=True)
class GateConfig:
    """When to accept a candidate.

    Attributes:
        alpha: One-sided significance level of the paired permutation test.
        flip_budget: Largest share of the paired probe episodes that may turn from pass to fail
            in an accepted candidate; one such flip is always tolerated, since a single sampled
            failure is indistinguishable from noise.
        resamples: Monte-Carlo sign flips when there are too many tasks to enumerate.
        seed: Seed for the Monte-Carlo resampling.
    """

    alpha: float = 0.05
    flip_budget: float = 0.1
    resamples: int = 20_000
    seed: int = 0


@dataclass(frozen=True)
class GateDecision:
    """A gate decision with the numbers behind it.

    Attributes:
        accepted: Whether the candidate replaces the incumbent.
        probe_gain: Candidate minus incumbent probe pass@1.
        p_value: One-sided p-value of the paired permutation test.
        flips_pass_to_fail: Paired episodes the incumbent passed and the candidate failed.
        flips_fail_to_pass: Paired episodes the incumbent failed and the candidate passed.
        flip_limit: The most pass->fail flips the budget allowed.
        incumbent_pass: Incumbent probe pass@1.
        candidate_pass: Candidate probe pass@1.
        tasks: Probe tasks compared.
        samples: Samples per task.
        reason: One sentence saying why it was accepted or rejected.
    """

    accepted: bool
    probe_gain: float
    p_value: float
    flips_pass_to_fail: int
    flips_fail_to_pass: int
    flip_limit: int
    incumbent_pass: float
    candidate_pass: float
    tasks: int
    samples: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """Return the decision as a JSON-serialisable dict."""
        return asdict(self)


def permutation_p_value(differences: Sequence[float], resamples: int, seed: int = 0) -> float:
    """One-sided p-value that the mean of paired ``differences`` is this large by chance."""
    values = np.abs(np.asarray([d for d in differences if d != 0], dtype=float))
    if values.size == 0:
        return 1.0
    observed = float(np.sum([d for d in differences if d != 0])) - 1e-12
    if values.size <= EXACT_MAX_TASKS:
        bits = np.arange(2**values.size)[:, None] >> np.arange(values.size) & 1
        totals = (1 - 2 * bits) @ values
        return float(np.mean(totals >= observed))
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(resamples, values.size))
    hits = int(np.sum(signs @ values >= observed))
    return (1 + hits) / (1 + resamples)


def decide(
    incumbent: Sequence[Trajectory], candidate: Sequence[Trajectory], config: GateConfig
) -> GateDecision:
    """Compare paired probe episodes and decide whether the candidate is accepted.

    Raises:
        ValueError: If the two sets of episodes do not cover the same ``(task, sample)`` pairs.
    """
    before = {(t.task.id, t.sample): t.passed for t in incumbent}
    after = {(t.task.id, t.sample): t.passed for t in candidate}
    if before.keys() != after.keys() or not before:
        raise ValueError("the gate needs both agents on the same, non-empty (task, sample) pairs")
    per_task: dict[str, list[int]] = defaultdict(list)
    for key, passed in before.items():
        per_task[key[0]].append(int(after[key]) - int(passed))
    differences = [sum(d) / len(d) for d in per_task.values()]
    incumbent_pass = sum(before.values()) / len(before)
    candidate_pass = sum(after.values()) / len(after)
    gain = candidate_pass - incumbent_pass
    p_value = permutation_p_value(differences, config.resamples, config.seed)
    pass_to_fail = sum(before[k] and not after[k] for k in before)
    fail_to_pass = sum(after[k] and not before[k] for k in before)
    flip_limit = max(1, int(config.flip_budget * len(before)))
    if gain <= 0:
        accepted, reason = False, f"no gain on the probe ({gain:+.3f})"
    elif p_value > config.alpha:
        accepted, reason = False, f"gain {gain:+.3f} not significant (p={p_value:.3f})"
    elif pass_to_fail > flip_limit:
        accepted, reason = False, f"{pass_to_fail} pass->fail flips exceed the budget {flip_limit}"
    else:
        accepted, reason = True, f"gain {gain:+.3f} (p={p_value:.4f}), {pass_to_fail} regressions"
    return GateDecision(
        accepted=accepted,
        probe_gain=gain,
        p_value=p_value,
        flips_pass_to_fail=pass_to_fail,
        flips_fail_to_pass=fail_to_pass,
        flip_limit=flip_limit,
        incumbent_pass=incumbent_pass,
        candidate_pass=candidate_pass,
        tasks=len(per_task),
        samples=len(before) // len(per_task),
        reason=reason,
    )
