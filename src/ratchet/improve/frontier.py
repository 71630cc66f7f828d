"""How often the agent succeeds, per task, family and difficulty: what practice steers by.

Tasks the agent solves sometimes carry the most signal: a success to imitate and a failure to
contrast it with (:mod:`ratchet.improve.levers.pairs`, :mod:`ratchet.improve.levers.grpo`). The
curriculum samples such tasks, and exploration picks each task's sampling temperature from the
same estimate. Estimates come from the agent's own choices only: hindsight replays are
successes by construction and would make every level look solved, and an episode that search
branched or a strategy steered (see :attr:`~ratchet.core.trajectory.Exploration.own`) measures
the search, not the agent.

A task's rate is its own passes and attempts shrunk toward its family-and-difficulty rate,
which is shrunk toward its difficulty's rate (each prior counts as :data:`PRIOR_WEIGHT`
attempts), so one lucky sample does not make a task look mastered, and a task never seen
inherits its family's record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.improve.hindsight import sources

PRIOR_WEIGHT = 2.0
FLOOR = 0.15

# Exploration temperatures: a task the agent never solves is sampled around its usual
# temperature (a small model's best guesses are there; at 1.0 the embedded model found 0 of
# 64 successes where 0.7 found about 20%), spread over the k samples so they differ; a task it
# always solves is sampled hotter, to find the failures and other solutions learning contrasts.
HOTTEST = 1.0
SPREAD = 0.2

Counts = dict[Hashable, tuple[int, int]]


def is_own(episode: Trajectory) -> bool:
    """Whether ``episode``'s outcome is the agent's own: not a hindsight replay, not steered."""
    if episode.metadata.get("hindsight"):
        return False
    return episode.exploration is None or episode.exploration.own


def _count(episodes: Iterable[Trajectory], key: str) -> Counts:
    counts: dict[Hashable, list[int]] = defaultdict(lambda: [0, 0])
    for episode in episodes:
        task = episode.task
        bucket = {
            "task": task.id,
            "cell": (task.family, task.difficulty),
            "level": task.difficulty,
        }[key]
        counts[bucket][0] += episode.passed
        counts[bucket][1] += 1
    return {k: (v[0], v[1]) for k, v in counts.items()}


def _shrunk(counts: tuple[int, int] | None, prior: float | None) -> float | None:
    passes, attempts = counts or (0, 0)
    if prior is None:
        return passes / attempts if attempts else None
    return (passes + PRIOR_WEIGHT * prior) / (attempts + PRIOR_WEIGHT)


@dataclass(frozen=True)
class SuccessRates:
    """Pass counts of real training episodes by task, by (family, difficulty) and by difficulty.

    Attributes:
        tasks: ``(passes, attempts)`` per task id.
        cells: ``(passes, attempts)`` per ``(family, difficulty)``.
        levels: ``(passes, attempts)`` per difficulty.
    """

    tasks: Counts
    cells: Counts
    levels: Counts

    @classmethod
    def of(cls, history: Sequence[Trajectory]) -> SuccessRates:
        """Count ``history``'s episodes but hindsight replays, crashes and steered episodes.

        Counted, steered calls made calc's mastered level 1 look half solved (every second
        sample drew its one call), and the curriculum spent 70 of a round's 96 tasks there.
        """
        real = [t for t in history if t.verdict is not None and is_own(t)]
        return cls(_count(real, "task"), _count(real, "cell"), _count(real, "level"))

    @classmethod
    def of_agent(cls, history: Sequence[Trajectory], agent: str | None) -> SuccessRates:
        """``agent``'s own rates once it has played, everyone's in ``history`` before.

        Pooled with an earlier agent's failures, a level the agent has mastered looks half
        solved; a version that has not played yet inherits the record it was trained from.
        """
        return cls.of([t for t in history if t.agent == agent] or history)

    def level(self, difficulty: int) -> float | None:
        """The pass rate at ``difficulty``, or ``None`` if nothing was played there."""
        return _shrunk(self.levels.get(difficulty), None)

    def cell(self, family: str, difficulty: int) -> float | None:
        """The (shrunk) pass rate of ``family`` at ``difficulty``, or ``None`` without data."""
        return _shrunk(self.cells.get((family, difficulty)), self.level(difficulty))

    def task(self, task: Task) -> float | None:
        """The (shrunk) pass rate of ``task``, or ``None`` without any data around it."""
        return _shrunk(self.tasks.get(task.id), self.cell(task.family, task.difficulty))


def frontier_weight(rate: float | None) -> float:
    """``4 p (1 - p)``: 1 at a 50% success rate, floored at :data:`FLOOR`; 1 when unknown.

    The floor keeps mastered work in the mix (against forgetting) and hopeless work too (for
    the odd lucky success).
    """
    if rate is None:
        return 1.0
    return max(4 * rate * (1 - rate), FLOOR)


def lesson_rates(history: Sequence[Trajectory], agent: str | None) -> dict[int, float]:
    """Per level, the share of the tasks practised there that gave at least one verified lesson.

    A task gave a lesson when one of its episodes passed (a sample, or a branch the search
    steered) or hindsight relabelled one of its failures into a verified success at the task's
    level or above (see :func:`~ratchet.improve.hindsight.sources`). Counted over
    ``agent``'s own training episodes once it has played, everyone's before (as
    :meth:`SuccessRates.of_agent`).
    """
    mine = [t for t in history if t.agent == agent] or list(history)
    played = {
        t.task.id: t.task.difficulty
        for t in mine
        if t.verdict is not None and not t.metadata.get("hindsight")
    }
    taught = {t.task.id for t in mine if t.passed and not t.metadata.get("hindsight")}
    taught |= {task_id for _, task_id, _ in sources(mine)}
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for task_id, level in played.items():
        counts[level][0] += task_id in taught
        counts[level][1] += 1
    return {level: taught_n / n for level, (taught_n, n) in sorted(counts.items())}


def level_weight(rate: float | None, lessons: float | None) -> float:
    """How much practice a level gets: its frontier weight, or its lessons' worth if higher.

    ``4 p (1 - p)`` of the agent's own pass rate ``rate`` reads a level the agent cannot yet
    start as hopeless; but search and hindsight may still make lessons there, which is how a
    level is learnt. So the weight is at least ``lessons`` (the share of the level's tasks that
    gave a lesson, see :func:`lesson_rates`) times ``1 - rate``: lessons the agent makes on its
    own teach it less. On dev seed 0, calc's and grid's round-3 level-2 weights were the floor,
    0.15, where the level's lessons give 0.61 and 0.35.
    """
    return max(frontier_weight(rate), (lessons or 0.0) * (1 - (rate or 0.0)))


def explore_temperatures(rate: float | None, k: int, usual: float) -> list[float]:
    """Sampling temperatures for the ``k`` samples of a task the agent solves at ``rate``.

    The centre moves from ``usual`` (never solved, or unknown) up to :data:`HOTTEST` (always
    solved); the samples spread evenly around it by up to ``SPREAD`` either way, the spread
    narrowing as the rate grows.

    Args:
        rate: The agent's estimated success rate on the task, ``None`` if unknown.
        k: Samples of the task.
        usual: The agent's own temperature (probe and test episodes use it).
    """
    p = rate or 0.0
    centre = usual + (max(HOTTEST, usual) - usual) * p
    half = SPREAD * (1 - p)
    if k == 1:
        return [round(centre, 3)]
    return [round(max(0.05, centre + half * (2 * i / (k - 1) - 1)), 3) for i in range(k)]
