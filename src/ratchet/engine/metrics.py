"""Evaluation metrics: pass@1, unbiased pass@k, pass^k, mean score, confidence intervals."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import comb
from typing import Any

from ratchet.core.stats import pass_rate_interval
from ratchet.core.task import member_of
from ratchet.core.trajectory import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that at least one of ``k`` samples passes, from ``c`` of ``n`` passing."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that all ``k`` samples pass (tau-bench's pass^k), from ``c`` of ``n``."""
    return comb(c, k) / comb(n, k)


@dataclass(frozen=True)
class Metrics:
    """What an evaluation measured over tasks played ``k`` times each.

    Attributes:
        n: Number of tasks.
        k: Samples per task.
        pass_at_1: Mean per-task success rate.
        pass_at_k: Unbiased pass@k (at least one of k passes).
        pass_hat_k: pass^k (all k pass): consistency.
        mean_score: Mean verifier score.
        ci95: 95% interval for pass@1: Wilson with one sample per task, a task-clustered
            bootstrap with several (see :func:`ratchet.core.stats.pass_rate_interval`).
        ci_method: How ``ci95`` was computed.
        tokens_per_task: Mean tokens (prompt + completion) over a task's k samples.
        seconds_per_task: Wall time of the evaluation divided by the number of tasks (when the
            caller measured it), else the episodes' own working time per task.
        errors_per_episode: Mean error observations per episode.
        by_difficulty: The same numbers per difficulty level.
        by_env: The same numbers (each with its own levels) per env, when the episodes come
            from several envs (a suite, see :func:`ratchet.core.task.member_of`); else empty.
        infrastructure_errors: Episodes left out because their infrastructure failed (a
            server down or full, a lost connection): they say nothing of the agent.
    """

    n: int
    k: int
    pass_at_1: float
    pass_at_k: float
    pass_hat_k: float
    mean_score: float
    ci95: tuple[float, float]
    ci_method: str
    tokens_per_task: float
    seconds_per_task: float
    errors_per_episode: float
    by_difficulty: dict[int, Metrics] = field(default_factory=dict)
    infrastructure_errors: int = 0
    by_env: dict[str, Metrics] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the metrics under the keys ``ratchet eval --json`` prints.

        ``by_env`` is there only for episodes of several envs.
        """
        envs = {"by_env": {name: m.to_dict() for name, m in sorted(self.by_env.items())}}
        return {
            "n": self.n,
            "k": self.k,
            "pass@1": self.pass_at_1,
            "pass@k": self.pass_at_k,
            "pass^k": self.pass_hat_k,
            "mean_score": self.mean_score,
            "ci95": list(self.ci95),
            "ci_method": self.ci_method,
            "tokens_per_task": self.tokens_per_task,
            "seconds_per_task": self.seconds_per_task,
            "errors_per_episode": self.errors_per_episode,
            "by_difficulty": {str(d): m.to_dict() for d, m in sorted(self.by_difficulty.items())},
            "infrastructure_errors": self.infrastructure_errors,
            **(envs if self.by_env else {}),
        }


def summarize(
    trajectories: Sequence[Trajectory],
    k: int,
    wall_s: float | None = None,
    per_difficulty: bool = True,
) -> Metrics:
    """Compute :class:`Metrics` from trajectories (each task should have ``k`` samples).

    A crashed episode counts as a failure with score 0, except one whose infrastructure failed
    (:attr:`~ratchet.core.trajectory.Trajectory.infrastructure_failed`): it is left out and
    counted in ``infrastructure_errors``. Tasks with fewer than ``k`` samples (an interrupted
    run, or samples left out) use the samples they have, with ``k`` capped at that number.

    Args:
        trajectories: The episodes.
        k: Samples per task asked for.
        wall_s: Wall time the evaluation took, if measured (for ``seconds_per_task``).
        per_difficulty: Also compute the metrics per difficulty level, and per env where the
            episodes come from several.
    """
    lost = sum(t.infrastructure_failed for t in trajectories)
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        if not trajectory.infrastructure_failed:
            by_task[trajectory.task.id].append(trajectory)
    groups = list(by_task.values())
    if not groups:
        return Metrics(
            0, k, 0.0, 0.0, 0.0, 0.0, (0.0, 1.0), "wilson", 0.0, 0.0, 0.0,
            infrastructure_errors=lost,
        )  # fmt: skip
    rates = [sum(t.passed for t in g) / len(g) for g in groups]
    at_k = [pass_at_k(len(g), sum(t.passed for t in g), min(k, len(g))) for g in groups]
    hat_k = [pass_hat_k(len(g), sum(t.passed for t in g), min(k, len(g))) for g in groups]
    episodes = [t for g in groups for t in g]
    interval = pass_rate_interval([[t.passed for t in g] for g in groups])
    worked_s = sum(t.seconds for t in episodes)
    levels: dict[int, Metrics] = {}
    envs: dict[str, Metrics] = {}
    if per_difficulty:
        by_level: dict[int, list[Trajectory]] = defaultdict(list)
        by_env: dict[str, list[Trajectory]] = defaultdict(list)
        for trajectory in trajectories:  # the lost ones too: each level counts its own
            by_level[trajectory.task.difficulty].append(trajectory)
            by_env[member_of(trajectory.task)].append(trajectory)
        levels = {d: summarize(ts, k, per_difficulty=False) for d, ts in by_level.items()}
        if len(by_env) > 1:
            envs = {name: summarize(ts, k) for name, ts in by_env.items()}
    return Metrics(
        n=len(groups),
        k=k,
        pass_at_1=sum(rates) / len(groups),
        pass_at_k=sum(at_k) / len(groups),
        pass_hat_k=sum(hat_k) / len(groups),
        mean_score=sum(t.score for t in episodes) / len(episodes),
        ci95=(interval.low, interval.high),
        ci_method=interval.method,
        tokens_per_task=sum(t.tokens for t in episodes) / len(groups),
        seconds_per_task=(wall_s if wall_s is not None else worked_s) / len(groups),
        errors_per_episode=sum(t.errors for t in episodes) / len(episodes),
        by_difficulty=levels,
        infrastructure_errors=lost,
        by_env=envs,
    )
