"""Which strategy steers a branch: chosen by each strategy's measured yield, per level.

A strategy's yield at a level is its verified successes per generated token: how many of the
branches it steered there passed, over the tokens they cost (the discarded resamples of their
branching action included). Each record also counts the failed branches hindsight relabelled
into a success at their level (see :mod:`ratchet.improve.hindsight`), which is most of what a
level the agent cannot start yields, but the scheduler does not rank by them: a relabel is the
task the branch happened to solve, not one the env would set. Ranked by them on calc's level 2
(dev seed 1), the scheduler gave none of round 3's 102 level-2 branches to ``chain``, and 33 of
the run's 40 level-2 lessons took their second operand from their first call
(``(36 + 39) - 39``, answer the start); level 2 stayed at 0 on the test. Ranked by passes, 21 of
seed 0's 37 level-2 lessons came from ``chain``, none of them of that kind.

The scheduler is a Thompson sampler: for each branch it draws a pass rate for every strategy
from its Beta posterior at the branch's level (shrunk toward the strategy's record over all
levels, so a level it has not played yet starts from what it did elsewhere), divides it by the
strategy's mean cost per branch, and takes the best. A strategy that keeps paying gets most of
the budget; the others keep a share that shrinks with the evidence against them, and one that
starts paying is found again.

Everything is counted from the run's stored episodes, so a resumed round makes the same choices.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass

from ratchet.core.trajectory import Trajectory
from ratchet.improve.explore.strategies import Strategy
from ratchet.improve.hindsight import EpisodeKey, episode_key

PRIOR_WEIGHT = 2.0
"""Branches' worth of evidence a strategy's all-level record counts at a level."""


@dataclass(frozen=True)
class Yield:
    """What one strategy's branches did.

    Attributes:
        branches: Branches it steered.
        passed: How many of them the verifier passed.
        tokens: Tokens they generated (resamples included).
        relabelled: How many of the failed ones hindsight relabelled into a verified success.
    """

    branches: int = 0
    passed: int = 0
    tokens: int = 0
    relabelled: int = 0

    def __add__(self, other: Yield) -> Yield:
        return Yield(
            self.branches + other.branches,
            self.passed + other.passed,
            self.tokens + other.tokens,
            self.relabelled + other.relabelled,
        )

    def to_list(self) -> list[int]:
        """``[branches, passed, tokens, relabelled]``, as round records keep it."""
        return [self.branches, self.passed, self.tokens, self.relabelled]


def tally(
    episodes: Iterable[Trajectory], relabelled: Set[EpisodeKey] = frozenset()
) -> dict[tuple[str, int], Yield]:
    """The yield of every strategy at every level, from the branches among ``episodes``.

    Args:
        episodes: Episodes; those a strategy steered from a node (branches) are counted.
        relabelled: The failed episodes hindsight relabelled into a verified success (see
            :func:`~ratchet.improve.hindsight.sources`).
    """
    found: dict[tuple[str, int], Yield] = {}
    for episode in episodes:
        record = episode.exploration
        if record is None or record.parent is None or episode.error is not None:
            continue
        key = (record.strategy, episode.task.difficulty)
        tokens = episode.completion_tokens + record.discarded_tokens
        taught = not episode.passed and episode_key(episode) in relabelled
        found[key] = found.get(key, Yield()) + Yield(1, int(episode.passed), tokens, int(taught))
    return found


def rank(
    strategies: Sequence[Strategy],
    level: int,
    yields: dict[tuple[str, int], Yield],
    rng: random.Random,
) -> list[Strategy]:
    """``strategies`` for one branch at ``level``, best first by one posterior draw each.

    The search takes the first that finds a node of its kind in the task's tree; where one
    finds none (``close`` needs a node where an episode went on instead of finishing), the next
    of the same draw takes its place. In list order instead, the cheapest strategy's draws fell
    through to ``policy`` first: on calc's level 2, ``policy`` steered 91 of 187 branches.

    Args:
        strategies: The strategies to choose among (not empty).
        level: The task's difficulty.
        yields: Every strategy's yield per level so far (see :func:`tally`).
        rng: Draws the posterior samples.
    """
    everywhere = {
        s.name: sum((y for (name, _), y in yields.items() if name == s.name), Yield())
        for s in strategies
    }
    total = sum(everywhere.values(), Yield())
    mean_cost = total.tokens / total.branches if total.branches else 1.0
    values: list[float] = []
    for strategy in strategies:
        pooled, here = everywhere[strategy.name], yields.get((strategy.name, level), Yield())
        prior = (pooled.passed + 1) / (pooled.branches + 2)
        alpha = PRIOR_WEIGHT * prior + here.passed
        beta = PRIOR_WEIGHT * (1 - prior) + here.branches - here.passed
        cost = (pooled.tokens + mean_cost) / (pooled.branches + 1)
        values.append(rng.betavariate(alpha, beta) / max(cost, 1.0))
    order = sorted(range(len(strategies)), key=lambda i: -values[i])
    return [strategies[i] for i in order]
