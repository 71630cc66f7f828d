"""Tasks: one instruction plus the hidden facts needed to build and verify its world.

Two tasks are the same *problem* when they share a problem key: by default the canonical JSON
of their ``params`` (the facts that decide the world and the right outcome), never the wording
the agent sees. Splits are assigned by hashing the problem key, so one problem can never sit in
``train`` under one wording and in ``test`` under another; an env whose params carry facts that
do not change the problem (a cosmetic choice, say) declares its own key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Split = Literal["train", "probe", "test"]
SPLITS: tuple[Split, ...] = get_args(Split)

# Share of the problem-key hash space each split owns.
_SPLIT_BUCKETS: dict[Split, range] = {
    "train": range(0, 80),
    "probe": range(80, 90),
    "test": range(90, 100),
}

ProblemKey = Callable[[dict[str, Any]], str]
"""``problem_key(params) -> str``: what makes two tasks the same problem."""

Sampler = Callable[[random.Random, int], "TaskSpec"]
"""``sample(rng, difficulty) -> TaskSpec``: an env's task generator, a pure function."""


@dataclass(frozen=True)
class Task:
    """One task: what the agent is told, and the hidden facts its world and verifier use.

    Attributes:
        id: Stable identifier, derived from the env name, the problem and the wording.
        env: Name of the env that made the task (e.g. ``"calc"``).
        instruction: The text the agent sees.
        split: ``train``, ``probe`` or ``test``; decided by the problem key alone.
        problem: The problem key (see :func:`canonical_key`); equal keys are the same problem.
            Tasks made by :func:`make_task` (and so by every env's ``tasks()``) always have one.
        family: A coarse task kind inside the env, used for reports and curricula.
        difficulty: 1 (easiest) and up; what it counts is env-specific.
        seed: The seed that drew the task; envs may use it to build the world.
        params: Hidden facts (JSON-serialisable) needed to build and verify the world.
        noop_correct: Doing nothing is the correct outcome (a request the policy forbids, a
            bug report that is not a bug): ``check_env`` does not hold such a task to the rule
            that a null or forged-claim policy must fail.
    """

    id: str
    env: str
    instruction: str
    split: Split
    problem: str = ""
    family: str = "default"
    difficulty: int = 1
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    noop_correct: bool = False


@dataclass(frozen=True)
class TaskSpec:
    """What an env's sampler (or hindsight description) returns: instruction and params.

    Attributes:
        instruction: The text the agent sees.
        params: Hidden facts for building and verifying the world (JSON-serialisable).
        family: Task kind inside the env.
        difficulty: Set by hindsight descriptions and task pools; samplers leave it ``None``
            because the difficulty they were asked for is recorded.
        noop_correct: Doing nothing is the correct outcome (see :class:`Task`).
    """

    instruction: str
    params: dict[str, Any]
    family: str = "default"
    difficulty: int | None = None
    noop_correct: bool = False


def canonical_key(params: dict[str, Any]) -> str:
    """Return the default problem key: the canonical JSON of ``params``."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def wording_key(instruction: str) -> str:
    """Return an instruction as two wordings are compared: case and spacing aside."""
    return " ".join(instruction.casefold().split())


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def split_of(problem: str) -> Split:
    """Return the split that owns a problem key."""
    bucket = int(_digest("split", problem)[:8], 16) % 100
    return next(split for split, owned in _SPLIT_BUCKETS.items() if bucket in owned)


def make_task(
    env: str,
    spec: TaskSpec,
    *,
    difficulty: int,
    seed: int = 0,
    problem_key: ProblemKey = canonical_key,
    split: Split | None = None,
) -> Task:
    """Turn a :class:`TaskSpec` into a :class:`Task`.

    Its split is decided by its problem key, unless ``split`` is given: a benchmark's own fixed
    split (see :class:`ratchet.core.pool.TaskPool`), used as given.
    """
    problem = problem_key(spec.params)
    return Task(
        id=f"{env}-{_digest(problem, spec.instruction)[:12]}",
        env=env,
        instruction=spec.instruction,
        split=split or split_of(problem),
        problem=problem,
        family=spec.family,
        difficulty=spec.difficulty or difficulty,
        seed=seed,
        params=spec.params,
        noop_correct=spec.noop_correct,
    )


def generate_tasks(
    env: str,
    sample: Sampler,
    *,
    split: Split,
    n: int,
    seed: int = 0,
    difficulty: int | None = None,
    max_difficulty: int = 5,
    problem_key: ProblemKey = canonical_key,
) -> list[Task]:
    """Draw ``n`` tasks of one split, each a different problem, from an env's sampler.

    Each candidate is drawn from its own seed and kept only if its problem key hashes into
    ``split`` and is new to this draw, so the same arguments always give the same list and no
    problem is ever in two splits.

    Args:
        env: The env's registered name, recorded on each task.
        sample: ``sample(rng, difficulty) -> TaskSpec``; must be a pure function of its inputs.
        split: Which split to draw from.
        n: How many tasks.
        seed: Base seed; different seeds give different task lists.
        difficulty: A fixed difficulty, or ``None`` to cycle through ``1..max_difficulty``.
        max_difficulty: The highest difficulty the env supports.
        problem_key: What makes two tasks the same problem.

    Raises:
        ValueError: On a bad split, a negative ``n`` or an out-of-range difficulty, or when the
            split holds fewer than ``n`` distinct problems at some difficulty (the message says
            how many were found).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0; got {n}")
    if difficulty is not None and not 1 <= difficulty <= max_difficulty:
        raise ValueError(f"difficulty for {env} must be in 1..{max_difficulty}; got {difficulty}")
    levels = [difficulty] if difficulty is not None else list(range(1, max_difficulty + 1))
    wanted = {level: n // len(levels) + (i < n % len(levels)) for i, level in enumerate(levels)}
    seen: set[str] = set()  # shared by the levels: a draw holds each problem once
    drawn = {
        level: list(_draw(env, sample, split, count, seed, level, problem_key, seen))
        for level, count in wanted.items()
    }
    # Interleave levels (1, 2, ..., 1, 2, ...) so any prefix of the list mixes difficulties.
    rounds = max(wanted.values(), default=0)
    return [drawn[level][i] for i in range(rounds) for level in levels if i < len(drawn[level])]


def _draw(
    env: str,
    sample: Sampler,
    split: Split,
    n: int,
    seed: int,
    level: int,
    problem_key: ProblemKey,
    seen: set[str],
) -> Iterator[Task]:
    found = attempts = 0
    while found < n:
        attempts += 1
        if attempts > 100 * n + 2000:
            raise ValueError(
                f"{env}: found only {found} distinct {split} problems at difficulty {level} "
                f"in {attempts - 1} draws, fewer than the {n} asked for; the problem space at "
                "this difficulty is too small for disjoint splits of that size"
            )
        task_seed = int(_digest(env, str(seed), str(level), str(attempts))[:12], 16)
        task = _candidate(env, sample, task_seed, level, problem_key)
        if task.split != split or task.problem in seen:
            continue
        seen.add(task.problem)
        found += 1
        yield task


CANDIDATES_KEPT = 16_384
"""Drawn candidates :func:`generate_tasks` keeps for reuse (a few KB each)."""


def _candidate(
    env: str, sample: Sampler, task_seed: int, level: int, problem_key: ProblemKey
) -> Task:
    """The task one seed draws at one level.

    The candidates of a draw depend on the seed and level, not on the split asked for, so the
    draws of ``train``, ``probe`` and ``test`` (and repeated draws) meet the same candidates:
    keeping them makes a draw cost about the candidates of its rarest split rather than of
    every split (a grid candidate at a high level takes about 20 ms to sample).
    """
    try:
        hash((sample, problem_key))
    except TypeError:  # an unhashable sampler or key: draw without the cache
        return _make_candidate(env, sample, task_seed, level, problem_key)
    return _cached_candidate(env, sample, task_seed, level, problem_key)


def _make_candidate(
    env: str, sample: Sampler, task_seed: int, level: int, problem_key: ProblemKey
) -> Task:
    spec = sample(random.Random(task_seed), level)
    return make_task(env, spec, difficulty=level, seed=task_seed, problem_key=problem_key)


_cached_candidate = functools.lru_cache(maxsize=CANDIDATES_KEPT)(_make_candidate)
