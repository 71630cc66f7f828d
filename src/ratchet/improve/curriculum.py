"""Choosing what to practise: frontier difficulties first, harder as the agent improves.

Tasks the agent solves sometimes carry the most learning signal; tasks it always solves teach
little and tasks it never solves give no verified successes to learn from. The curriculum
weights each difficulty level by how close its success rate is to that frontier, opens the next
level once the highest one practised is mostly solved, and gives families that failed more
often a larger share of the fresh tasks. It also retries some failed training tasks, since a
later success on a task once failed is the most direct evidence of progress, and mixes in
training tasks proposed by a lever (the ``tasks`` lever writes them aimed at the agent's
failures) that have not been solved yet.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ratchet.core.env import Env
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory


@dataclass(frozen=True)
class CurriculumConfig:
    """Curriculum settings.

    Attributes:
        start_difficulty: Highest level practised before there is any history.
        max_difficulty: Never practise above this level (``None``: the env's maximum).
        open_next_at: Success rate on the highest practised level that opens the next one.
        revisit_share: Share of each batch spent retrying failed training tasks.
        proposed_share: Share of each batch given to proposed tasks not solved yet.
    """

    start_difficulty: int = 2
    max_difficulty: int | None = None
    open_next_at: float = 0.5
    revisit_share: float = 0.25
    proposed_share: float = 0.25


def success_rates(history: Sequence[Trajectory], key: str) -> dict[object, tuple[int, int]]:
    """Return ``(passes, attempts)`` per task ``difficulty`` or ``family`` in ``history``."""
    counts: dict[object, list[int]] = defaultdict(lambda: [0, 0])
    for trajectory in history:
        bucket = counts[getattr(trajectory.task, key)]
        bucket[0] += trajectory.passed
        bucket[1] += 1
    return {k: (v[0], v[1]) for k, v in counts.items()}


def level_weights(
    history: Sequence[Trajectory], top: int, config: CurriculumConfig
) -> dict[int, float]:
    """Weight each difficulty level to practise by how close it is to the frontier."""
    rates = success_rates(history, "difficulty")
    practised = [level for level in rates if isinstance(level, int)]
    highest = max([config.start_difficulty, *practised])
    passes, attempts = rates.get(highest, (0, 0))
    if attempts and passes / attempts >= config.open_next_at:
        highest += 1
    weights = {}
    for level in range(1, min(highest, top) + 1):
        passes, attempts = rates.get(level, (0, 0))
        rate = passes / attempts if attempts else 0.5
        # 4 p (1 - p) peaks at 1 for p = 0.5; the floor keeps mastered and hopeless levels in
        # the mix (against forgetting, and for the odd lucky success).
        weights[level] = max(4 * rate * (1 - rate), 0.15)
    return weights


def choose_tasks(
    env: Env,
    history: Sequence[Trajectory],
    n: int,
    seed: int,
    config: CurriculumConfig | None = None,
    proposed: Sequence[Task] = (),
) -> list[Task]:
    """Choose ``n`` training tasks for the next round.

    Args:
        env: The env to draw fresh ``train`` tasks from.
        history: Training trajectories so far (any agent), for success rates and retries.
        n: How many tasks.
        seed: Seed for this round's draw.
        config: Curriculum settings.
        proposed: Training tasks proposed by levers; the ones never solved (those never
            played first) fill up to ``config.proposed_share`` of the batch.
    """
    config = config or CurriculumConfig()
    rng = random.Random(seed)
    top = min(config.max_difficulty or env.max_difficulty, env.max_difficulty)
    weights = level_weights(history, top, config)
    solved = {t.task.id for t in history if t.passed}
    failed = sorted(
        {t.task.id: t.task for t in history if t.task.id not in solved}.values(),
        key=lambda task: task.id,
    )
    failed = [task for task in failed if task.difficulty in weights]
    revisits = rng.sample(failed, min(len(failed), int(n * config.revisit_share)))
    seen = {t.task.id for t in history}
    offered = sorted(
        (t for t in proposed if t.split == "train" and t.id not in solved and t.difficulty <= top),
        key=lambda task: (task.id in seen, task.id),
    )
    chosen = {task.id for task in revisits}
    revisits += [t for t in offered if t.id not in chosen][: int(n * config.proposed_share)]
    seen |= {task.id for task in revisits}
    family_rates = success_rates(history, "family")
    fresh: list[Task] = []
    levels = list(weights)
    for _ in range(50 * n):  # bounded: a small env may run out of unseen tasks
        if len(fresh) >= n - len(revisits):
            break
        level = rng.choices(levels, weights=[weights[lv] for lv in levels])[0]
        pool = [
            t
            for t in env.tasks("train", 8, seed=rng.randrange(2**31), difficulty=level)
            if t.id not in seen
        ]
        if not pool:
            continue
        family_weight = [1.2 - _rate(family_rates.get(t.family)) for t in pool]
        task = rng.choices(pool, weights=family_weight)[0]
        seen.add(task.id)
        fresh.append(task)
    return [*revisits, *fresh]


def _rate(counts: tuple[int, int] | None) -> float:
    if not counts or not counts[1]:
        return 0.5
    return counts[0] / counts[1]
