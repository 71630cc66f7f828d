"""Task pools: a finite benchmark with its own train, probe and test splits, used as given.

Generated envs draw tasks from a sampler and split them by hashing the problem key. A
benchmark that already exists (90 games, a dataset's rows) has a fixed list of tasks and,
usually, its own splits; re-splitting it would mix its test set into training. A
:class:`TaskPool` keeps each task in the split it was given. The problem-key rule still
holds: a problem listed in two splits is kept only in the more held-out one (test over probe
over train), so nothing probed or tested is ever trained on, and a problem listed twice in one
split is drawn once.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ratchet.core.task import SPLITS, ProblemKey, Split, Task, TaskSpec, canonical_key, make_task

# Most held-out first: a problem in two splits stays in the first of these.
_PRECEDENCE: tuple[Split, ...] = ("test", "probe", "train")


@dataclass(frozen=True)
class TaskPool:
    """A fixed list of tasks per split.

    Attributes:
        train: Tasks agents may practise on.
        probe: Held-out tasks the gate compares agents on (each round draws from these).
        test: Held-out tasks for the final report only.
    """

    train: Sequence[TaskSpec] = ()
    probe: Sequence[TaskSpec] = ()
    test: Sequence[TaskSpec] = ()
    _built: dict[tuple[str, ProblemKey], dict[Split, list[Task]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_splits(cls, splits: Mapping[str, Sequence[TaskSpec]]) -> TaskPool:
        """Make a pool from ``{"train": [...], "probe": [...], "test": [...]}``.

        Raises:
            ValueError: If a key is not one of ``train``, ``probe`` and ``test``.
        """
        unknown = sorted(set(splits) - set(SPLITS))
        if unknown:
            raise ValueError(
                f"a task pool's splits are {', '.join(SPLITS)}; got {', '.join(unknown)}"
            )
        return cls(**{split: tuple(specs) for split, specs in splits.items()})

    @property
    def max_difficulty(self) -> int:
        """The highest difficulty of any task in the pool (1 when none sets one)."""
        specs = [*self.train, *self.probe, *self.test]
        return max((spec.difficulty or 1 for spec in specs), default=1)

    def tasks(
        self,
        env: str,
        split: Split,
        n: int,
        seed: int = 0,
        difficulty: int | None = None,
        problem_key: ProblemKey = canonical_key,
    ) -> list[Task]:
        """Draw ``n`` distinct tasks of ``split``, in an order shuffled by ``seed``.

        Args:
            env: The env's name, recorded on each task.
            split: Which split to draw from.
            n: How many tasks.
            seed: Orders the draw; the same arguments always give the same list.
            difficulty: Only tasks of this difficulty, or ``None`` for all.
            problem_key: What makes two tasks the same problem.

        Raises:
            ValueError: On a bad split or a negative ``n``, or when the split holds fewer than
                ``n`` problems (the message says how many it holds).
        """
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
        if n < 0:
            raise ValueError(f"n must be >= 0; got {n}")
        held = [
            task
            for task in self._tasks(env, problem_key)[split]
            if difficulty is None or task.difficulty == difficulty
        ]
        if len(held) < n:
            at = f" at difficulty {difficulty}" if difficulty is not None else ""
            raise ValueError(
                f"{env}: the task pool's {split} split holds {len(held)} problems{at}, "
                f"fewer than the {n} asked for"
            )
        random.Random(seed).shuffle(held)
        return held[:n]

    def split_holding(
        self, env: str, problem: str, problem_key: ProblemKey = canonical_key
    ) -> Split | None:
        """The split that holds ``problem`` (a problem key), or ``None`` if the pool lacks it."""
        return next(
            (
                split
                for split, tasks in self._tasks(env, problem_key).items()
                if any(task.problem == problem for task in tasks)
            ),
            None,
        )

    def size(self, env: str, split: Split, problem_key: ProblemKey = canonical_key) -> int:
        """How many distinct problems ``split`` holds once overlaps are resolved."""
        return len(self._tasks(env, problem_key)[split])

    def dropped(self, problem_key: ProblemKey = canonical_key) -> dict[Split, int]:
        """How many listed tasks of each split are dropped for a more held-out split's problem.

        Splits that lose none are left out; the most held-out comes first.
        """
        held: set[str] = set()
        dropped: dict[Split, int] = {}
        for split in _PRECEDENCE:
            keys = [problem_key(spec.params) for spec in getattr(self, split)]
            repeated = sum(key in held for key in keys)
            if repeated:
                dropped[split] = repeated
            held.update(keys)
        return dropped

    def _tasks(self, env: str, problem_key: ProblemKey) -> dict[Split, list[Task]]:
        # Building every task's key costs a pass over the pool; pools are drawn from many times.
        cache_key = (env, problem_key)
        if cache_key not in self._built:
            self._built[cache_key] = self._build(env, problem_key)
        return self._built[cache_key]

    def _build(self, env: str, problem_key: ProblemKey) -> dict[Split, list[Task]]:
        owned: set[str] = set()
        built: dict[Split, list[Task]] = {}
        for split in _PRECEDENCE:
            built[split] = []
            for index, spec in enumerate(getattr(self, split)):
                task = make_task(
                    env,
                    spec,
                    difficulty=spec.difficulty or 1,
                    seed=index,
                    problem_key=problem_key,
                    split=split,
                )
                if task.problem not in owned:
                    owned.add(task.problem)
                    built[split].append(task)
        return built


def dropped_text(dropped: dict[Split, int]) -> str:
    """:meth:`TaskPool.dropped`'s counts for a warning: ``"2 from train, 1 from probe"``."""
    return ", ".join(f"{count} from {split}" for split, count in reversed(dropped.items()))
