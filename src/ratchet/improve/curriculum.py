"""Choosing what to practise: the frontier of what the agent can do, one level at a time.

Levels open in order: practice starts at ``start_difficulty`` and the next level opens once the
incumbent passes enough of the highest open one on the probe (its probe pass rate there reaches
``open_next_at``, 0.3), or once practice there gave verified lessons (a passed episode, or a
failure hindsight relabelled at that level or above) on that share of its tasks, since transfer
from easy to hard work within an env is strong and a level far beyond both the agent and its
search yields no success to learn from. Within the open levels, work is sampled where
the agent succeeds sometimes (see :mod:`ratchet.improve.frontier`): each level by ``4 p (1 - p)``
of its training success rate, or by the share of its tasks that gave a verified lesson (search and
hindsight included) times ``1 - p`` where that is higher, and each fresh task by ``4 p (1 - p)`` of
its family at its level, so a family the agent already masters (or cannot yet start) gives way to
one on its frontier. A suite's families are its members' (``calc/...``), so the same weights spread
the budget over its envs, toward those on their frontier. A share of each batch revisits training
tasks already played, again weighted by how close each task's own record is to the frontier: those
are the tasks whose samples come out mixed, which is what the ``pairs`` and ``grpo`` levers learn
from.

:func:`choose_tasks` returns the tasks and a note of why (open levels, the probe rates that
opened them, the weights), which the loop keeps in the round's record. Training tasks that a
lever proposed (the ``tasks`` lever writes them aimed at the agent's failures) and that have not
been solved yet take up to ``proposed_share`` of the batch.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from ratchet.core.env import Env
from ratchet.core.task import Task, member_of
from ratchet.core.trajectory import Trajectory
from ratchet.improve.frontier import (
    SuccessRates,
    frontier_weight,
    is_own,
    lesson_rates,
    level_weight,
)


@dataclass(frozen=True)
class CurriculumConfig:
    """Curriculum settings.

    Attributes:
        start_difficulty: Highest level open before the probe says anything.
        max_difficulty: Never practise above this level (``None``: the env's maximum).
        open_next_at: The incumbent's probe pass rate, or its share of tasks that gave a
            lesson in practice, at the highest open level that opens the next one. 0.3:
            exploration searches a level the agent cannot start, so it need not master the
            one below first (on seeds 0-1, at 0.7 and then at 0.5, grid's and calc's round-1
            agents, at 0.46 and 0.42 of their level-1 probe, kept practising level 1 alone
            for the rest of the run). Lessons count because a level's probe lags its
            practice by a round: on calc (dev seed 1) round 3's incumbent passed none of
            level 2 on the probe while its search and hindsight made lessons of 0.69 of the
            level-2 tasks it practised, and level 3 never opened in a three-round run.
        revisit_share: Share of each batch spent replaying training tasks already played.
        proposed_share: Share of each batch given to proposed tasks not solved yet.
    """

    start_difficulty: int = 1
    max_difficulty: int | None = None
    open_next_at: float = 0.3
    revisit_share: float = 0.25
    proposed_share: float = 0.25


@dataclass(frozen=True)
class Choice:
    """A round's training tasks and why they were chosen.

    Attributes:
        tasks: The tasks, revisits first.
        note: JSON-ready reasons: ``open_to`` (highest open level), ``probe`` (the incumbent's
            probe pass rate per level), ``levels`` (each open level's weight), ``lessons``
            (per level played, the share of its tasks that gave a lesson), ``families``
            (``family@level`` weights of the fresh draw), ``revisits`` and ``fresh`` counts,
            and for tasks of several envs (a suite) ``envs``, the tasks of each.
    """

    tasks: list[Task]
    note: dict[str, Any] = field(default_factory=dict)


def probe_rates(probe: Sequence[Trajectory]) -> dict[int, float]:
    """The pass rate per difficulty of ``probe`` episodes."""
    counts: dict[int, list[int]] = {}
    for episode in probe:
        bucket = counts.setdefault(episode.task.difficulty, [0, 0])
        bucket[0] += episode.passed
        bucket[1] += 1
    return {level: passes / n for level, (passes, n) in sorted(counts.items())}


def open_levels(
    probe: Mapping[int, float],
    top: int,
    config: CurriculumConfig,
    lessons: Mapping[int, float] | None = None,
) -> int:
    """The highest open level: the start, plus one per level in a row that opened the next.

    Args:
        probe: The incumbent's probe pass rate per level.
        top: The highest level there is to open.
        config: Curriculum settings (``start_difficulty``, ``open_next_at``).
        lessons: Per level practised, the share of its tasks that gave a verified lesson
            (see :func:`~ratchet.improve.frontier.lesson_rates`); a level reaching
            ``open_next_at`` here opens the next as its probe rate would.
    """
    lessons = lessons or {}
    highest = min(config.start_difficulty, top)
    while highest < top and max(probe.get(highest, 0.0), lessons.get(highest, 0.0)) >= (
        config.open_next_at
    ):
        highest += 1
    return highest


def _weighted_sample(
    rng: random.Random, items: Sequence[Task], weights: Sequence[float], m: int
) -> list[Task]:
    """``m`` items drawn without replacement with probability growing with their weights."""
    keyed = sorted(
        zip(items, weights, strict=True), key=lambda pair: -(rng.random() ** (1 / pair[1]))
    )
    return [item for item, _ in keyed[:m]]


def _draw_fresh(
    env: Env,
    rng: random.Random,
    rates: SuccessRates,
    levels: Mapping[int, float],
    seen: Set[str],
    wanted: int,
    attempts: int,
) -> tuple[list[Task], dict[str, float]]:
    """Up to ``wanted`` fresh training tasks, none of them ``seen``, and the weights behind them.

    Each draw picks an open level by its weight in ``levels``, then one of a few unseen tasks of
    that level by the frontier weight of its family there. At most ``attempts`` draws: a small
    env may run out of unseen tasks. Returns the tasks and the ``family@level`` weights met on
    the way.
    """
    taken = set(seen)
    fresh: list[Task] = []
    families: dict[str, float] = {}
    for _ in range(attempts):
        if len(fresh) >= wanted:
            break
        level = rng.choices(list(levels), weights=list(levels.values()))[0]
        draw = env.tasks("train", 8, seed=rng.randrange(2**31), difficulty=level)
        unseen = [t for t in draw if t.id not in taken]
        if not unseen:
            continue
        weights = [frontier_weight(rates.cell(t.family, level)) for t in unseen]
        families.update({f"{t.family}@{level}": w for t, w in zip(unseen, weights, strict=True)})
        task = rng.choices(unseen, weights=weights)[0]
        taken.add(task.id)
        fresh.append(task)
    return fresh, families


def _level_weights(
    history: Sequence[Trajectory],
    rates: SuccessRates,
    lessons: Mapping[int, float],
    mastery: Mapping[int, float],
    highest: int,
    incumbent: str | None,
) -> dict[int, float]:
    """Each open level's weight (see :func:`~ratchet.improve.frontier.level_weight`)."""
    # A new incumbent's probe is its own record; the training rates it inherits are not.
    practised = {t.task.difficulty for t in history if t.agent == incumbent and is_own(t)}
    probed = {} if incumbent is None else {k: v for k, v in mastery.items() if k not in practised}
    return {
        level: level_weight(probed.get(level, rates.level(level)), lessons.get(level))
        for level in range(1, highest + 1)
    }


def choose_tasks(
    env: Env,
    history: Sequence[Trajectory],
    n: int,
    seed: int,
    config: CurriculumConfig | None = None,
    probe: Sequence[Trajectory] = (),
    proposed: Sequence[Task] = (),
    incumbent: str | None = None,
) -> Choice:
    """Choose ``n`` training tasks for the next round.

    Args:
        env: The env to draw fresh ``train`` tasks from.
        history: Training episodes so far (success rates, revisits); hindsight replays and
            episodes with a drawn call are ignored (see :class:`.SuccessRates`).
        n: How many tasks.
        seed: Seed for this round's draw.
        config: Curriculum settings.
        probe: The incumbent's probe episodes (which levels it masters).
        proposed: Training tasks proposed by levers; the ones never solved (those never
            played first) fill up to ``config.proposed_share`` of the batch.
        incumbent: The version that will practise. Success rates come from its own training
            episodes when it has any: pooled with an earlier agent's failures, a level it
            has mastered looks half solved, and takes the batch from the level it has not.
            At a level it has not practised yet but was probed at, a level's weight reads
            its probe pass rate: on calc (dev seed 1), a new adapter that passed 0.92 of
            level 1 on the probe inherited its base's level-1 rate of 0 and lesson share
            0.94, and the level weighed 0.94 where its own rate gives 0.30.
    """
    config = config or CurriculumConfig()
    rng = random.Random(seed)
    top = min(config.max_difficulty or env.max_difficulty, env.max_difficulty)
    mastery = probe_rates(probe)
    lessons = lesson_rates(history, incumbent)
    highest = open_levels(mastery, top, config, lessons)
    rates = SuccessRates.of_agent(history, incumbent)
    levels = _level_weights(history, rates, lessons, mastery, highest, incumbent)
    played = {
        t.task.id: t.task
        for t in history
        if not t.metadata.get("hindsight") and t.task.difficulty in levels
    }
    pool = sorted(played.values(), key=lambda task: task.id)
    revisits = _weighted_sample(
        rng,
        pool,
        [frontier_weight(rates.task(task)) for task in pool],
        min(len(pool), int(n * config.revisit_share)),
    )
    solved = {t.task.id for t in history if t.passed}
    seen = {t.task.id for t in history}
    offered = sorted(
        (t for t in proposed if t.split == "train" and t.id not in solved and t.difficulty <= top),
        key=lambda task: (task.id in seen, task.id),
    )
    chosen = {task.id for task in revisits}
    proposals = [t for t in offered if t.id not in chosen][: int(n * config.proposed_share)]
    revisits += proposals
    seen |= {task.id for task in revisits}
    fresh, families = _draw_fresh(env, rng, rates, levels, seen, n - len(revisits), 50 * n)
    note = {
        "open_to": highest,
        "probe": {str(level): round(rate, 3) for level, rate in mastery.items()},
        "levels": {str(level): round(w, 3) for level, w in levels.items()},
        "lessons": {str(level): round(rate, 3) for level, rate in lessons.items()},
        "families": {key: round(w, 3) for key, w in sorted(families.items())},
        "revisits": len(revisits) - len(proposals),
        "proposed": len(proposals),
        "fresh": len(fresh),
    }
    chosen_tasks = [*revisits, *fresh]
    envs = Counter(member_of(task) for task in chosen_tasks)
    if len(envs) > 1:  # a suite: how the round's budget spread over its envs
        note["envs"] = dict(sorted(envs.items()))
    return Choice(chosen_tasks, note)
