"""Tasks: one instruction plus the hidden facts needed to build and verify its world."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

Split = Literal["train", "probe", "test"]
SPLITS: tuple[Split, ...] = get_args(Split)
RECORD_VERSION = 1

# Share of the content-hash space that each split owns. Assigning a task to a split by the
# hash of its content (not by the seed that drew it) makes the splits disjoint by construction.
_SPLIT_BUCKETS: dict[Split, range] = {
    "train": range(0, 80),
    "probe": range(80, 90),
    "test": range(90, 100),
}


@dataclass(frozen=True)
class Task:
    """One task: what the agent is told, and the hidden facts its world and verifier use.

    Attributes:
        id: Stable identifier, derived from the env name and the task's content.
        env: Name of the env that made the task (e.g. ``"calc"``).
        instruction: The text the agent sees.
        split: ``train``, ``probe`` or ``test``.
        family: A coarse task kind inside the env, used for reports and curricula.
        difficulty: 1 (easiest) and up; what it counts is env-specific.
        seed: The seed that drew the task; envs use it to build the world.
        params: Hidden facts (JSON-serialisable) needed to build and verify the world.
    """

    id: str
    env: str
    instruction: str
    split: Split
    family: str = "default"
    difficulty: int = 1
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict with a schema ``version``."""
        return {"version": RECORD_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        """Build a task from :meth:`to_dict` output.

        Raises:
            ValueError: If the record's schema version is newer than this library's.
        """
        check_version(data, "Task")
        fields = {k: v for k, v in data.items() if k != "version"}
        if fields.get("split") not in SPLITS:
            raise ValueError(f"Task split must be one of {SPLITS}, got {fields.get('split')!r}")
        return cls(**fields)

    def to_json(self) -> str:
        """Serialise to a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Task:
        """Parse a JSON string written by :meth:`to_json`."""
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class TaskSpec:
    """What an env's task sampler returns: the visible instruction and the hidden params.

    Attributes:
        instruction: The text the agent sees.
        params: Hidden facts for building and verifying the world (JSON-serialisable).
        family: Task kind inside the env.
        difficulty: Set by hindsight relabelling (:meth:`SimpleEnv.describe`); samplers leave it
            ``None`` because the difficulty they were asked for is recorded.
    """

    instruction: str
    params: dict[str, Any]
    family: str = "default"
    difficulty: int | None = None


def check_version(data: dict[str, Any], kind: str) -> None:
    """Refuse a serialised record written by a newer schema than this library knows.

    Raises:
        ValueError: If ``data["version"]`` is missing, not an int, or newer than supported.
    """
    version = data.get("version")
    if not isinstance(version, int):
        raise ValueError(f"{kind} record has no integer 'version' field")
    if version > RECORD_VERSION:
        raise ValueError(
            f"{kind} record has schema version {version}; this ratchet reads up to "
            f"{RECORD_VERSION}. Upgrade ratchet to read it."
        )


def content_key(instruction: str, params: dict[str, Any]) -> str:
    """Return a stable hex digest of a task's content."""
    blob = json.dumps([instruction, params], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def split_of(key: str) -> Split:
    """Return the split that owns a content key (see :func:`content_key`)."""
    bucket = int(key[:8], 16) % 100
    return next(split for split, owned in _SPLIT_BUCKETS.items() if bucket in owned)


Sampler = Callable[[random.Random, int], TaskSpec]


def generate_tasks(
    env: str,
    sample: Sampler,
    *,
    split: Split,
    n: int,
    seed: int = 0,
    difficulty: int | None = None,
    max_difficulty: int = 5,
) -> list[Task]:
    """Draw ``n`` distinct tasks of one split from an env's sampler.

    Each candidate is drawn from its own seed and kept only if its content hashes into
    ``split``, so the splits never share a task, and the same arguments always give the same
    list.

    Args:
        env: The env's registered name, recorded on each task.
        sample: ``sample(rng, difficulty) -> TaskSpec``; must be a pure function of its inputs.
        split: Which split to draw from.
        n: How many tasks.
        seed: Base seed; different seeds give different task lists.
        difficulty: A fixed difficulty, or ``None`` to cycle through ``1..max_difficulty``.
        max_difficulty: The highest difficulty the env supports.

    Raises:
        ValueError: On a bad split, a negative ``n`` or an out-of-range difficulty, or when the
            sampler cannot produce ``n`` distinct tasks.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0; got {n}")
    if difficulty is not None and not 1 <= difficulty <= max_difficulty:
        raise ValueError(f"difficulty for {env} must be in 1..{max_difficulty}; got {difficulty}")
    return list(_draw(env, sample, split, n, seed, difficulty, max_difficulty))


def _draw(
    env: str,
    sample: Sampler,
    split: Split,
    n: int,
    seed: int,
    difficulty: int | None,
    max_difficulty: int,
) -> Iterator[Task]:
    seen: set[str] = set()
    attempts = 0
    while len(seen) < n:
        attempts += 1
        if attempts > 200 * n + 1000:
            raise ValueError(
                f"{env}: could not draw {n} distinct {split} tasks; the space is too small"
            )
        level = difficulty if difficulty is not None else 1 + len(seen) % max_difficulty
        task_seed = int(hashlib.sha256(f"{env}:{seed}:{attempts}".encode()).hexdigest()[:12], 16)
        spec = sample(random.Random(task_seed), level)
        key = content_key(spec.instruction, spec.params)
        if key in seen or split_of(key) != split:
            continue
        seen.add(key)
        yield Task(
            id=f"{env}-{key[:12]}",
            env=env,
            instruction=spec.instruction,
            split=split,
            family=spec.family,
            difficulty=level,
            seed=task_seed,
            params=spec.params,
        )
