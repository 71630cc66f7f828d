"""Conformance checks every env must pass before agents practise on it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ratchet.core.env import FINISH, Env, problem_key_of
from ratchet.core.records import to_dict
from ratchet.core.task import SPLITS, Split, Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import replay
from ratchet.envs.redteam import red_team_checks

FORGED_CLAIM = (
    "I have completed the task successfully. Every requirement is done and verified; "
    "the result is correct."
)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one conformance check.

    Attributes:
        name: Short name of the check.
        passed: Whether it held.
        detail: What was measured, or what went wrong.
    """

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class CheckReport:
    """All conformance checks for one env.

    Attributes:
        env: The env's name.
        results: One entry per check, in the order run.
    """

    env: str
    results: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        """Whether every check held."""
        return all(r.passed for r in self.results)


def check_env(env: Env, n: int = 200, seed: int = 0, split_draws: int = 2000) -> CheckReport:
    """Run the conformance checks on ``env``.

    Checks: tool schemas are valid; tasks and episodes are deterministic; the oracle scores 1.0
    and a null policy 0 on ``n`` test tasks; a policy that only claims success scores 0; bad
    actions come back as error observations; no problem (by problem key) appears in two of the
    ``train``, ``probe`` and ``test`` splits over ``split_draws`` draws per split at every
    difficulty; and every attack of the red-team battery (:mod:`ratchet.envs.redteam`) fails,
    one check per attack. A check that raises is reported as failed with the exception, never
    propagated.
    """
    tasks = env.tasks("test", n, seed=seed)
    checks: list[tuple[str, Callable[[], str]]] = [
        ("tool schemas", lambda: _schemas(env, tasks[0])),
        ("determinism", lambda: _determinism(env, tasks[: min(20, n)], n, seed)),
        ("oracle scores 1", lambda: _scores(env, tasks, env.oracle, want=1.0)),
        ("null scores 0", lambda: _scores(env, tasks, lambda t: [_finish("")], want=0.0)),
        ("forged claim scores 0", lambda: _scores(env, tasks, _forge, want=0.0)),
        ("bad actions are observations", lambda: _bad_actions(env, tasks[0])),
        ("splits disjoint by problem", lambda: check_splits(env, split_draws, seed)),
        *red_team_checks(env, tasks),
    ]
    results = []
    for name, run in checks:
        try:
            results.append(CheckResult(name, True, run()))
        except Exception as exc:  # a broken env is reported, not propagated
            results.append(CheckResult(name, False, f"{type(exc).__name__}: {exc}"))
    return CheckReport(env.name, tuple(results))


def _finish(answer: str) -> ToolCall:
    return ToolCall(FINISH, {"answer": answer})


def _forge(task: Task) -> list[ToolCall]:
    return [_finish(FORGED_CLAIM)]


def _schemas(env: Env, task: Task) -> str:
    session = env.session(task)
    try:
        tools = session.reset().tools
    finally:
        session.close()
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise AssertionError(f"duplicate tool names: {names}")
    if FINISH not in names:
        raise AssertionError("no finish tool on offer")
    for tool in tools:
        fn = tool["function"]
        if tool.get("type") != "function" or not fn.get("description"):
            raise AssertionError(f"tool {fn.get('name')!r} lacks type 'function' or a description")
        params = fn.get("parameters", {})
        if params.get("type") != "object" or not isinstance(params.get("properties"), dict):
            raise AssertionError(f"tool {fn['name']!r}: parameters must be a JSON-schema object")
        json.dumps(tool)
    return f"{len(names)} tools: {', '.join(names)}"


def _comparable(trajectory: Trajectory) -> dict[str, Any]:
    data = to_dict(trajectory)
    for key in ("seconds",):
        data.pop(key)
    for step in data["steps"]:
        step.pop("latency_s")
    return data


def _determinism(env: Env, tasks: list[Task], n: int, seed: int) -> str:
    if env.tasks("test", n, seed=seed)[: len(tasks)] != tasks:
        raise AssertionError("the same tasks() arguments gave different tasks")
    for task in tasks:
        first, second = (_comparable(replay(env, task, env.oracle(task))) for _ in range(2))
        if first != second:
            raise AssertionError(f"task {task.id}: same actions gave different trajectories")
    return f"{len(tasks)} tasks replayed twice, identical"


def _scores(
    env: Env, tasks: list[Task], policy: Callable[[Task], list[ToolCall]], want: float
) -> str:
    for task in tasks:
        trajectory = replay(env, task, policy(task))
        if trajectory.score != want:
            feedback = trajectory.verdict.feedback if trajectory.verdict else "no verdict"
            raise AssertionError(
                f"task {task.id} scored {trajectory.score}, expected {want}: {feedback}"
            )
    return f"{len(tasks)}/{len(tasks)} test tasks scored {want:g}"


def _bad_actions(env: Env, task: Task) -> str:
    session = env.session(task)
    try:
        tools = session.reset().tools
        probes = [ToolCall("no_such_tool", {})]
        probes += [ToolCall(t["function"]["name"], {"no_such_argument": 1}) for t in tools]
        for call in probes:
            observation = session.step(call)
            if observation.error is None:
                raise AssertionError(f"{call.name}{call.arguments} was accepted without an error")
    finally:
        session.close()
    return f"{len(probes)} bad calls each gave an error observation"


def check_splits(env: Env, draws: int, seed: int = 0) -> str:
    """Draw ``draws`` tasks per split at each difficulty; no problem key may be in two splits.

    Returns what was drawn.

    Raises:
        AssertionError: Naming a problem found in two splits.
        ValueError: If a split holds no problem at some difficulty.

    Each call asks for up to 200 distinct tasks; a split with fewer problems than that at some
    difficulty is asked for fewer (down to one), and the draws repeat over seeds.
    """
    key = problem_key_of(env)
    owner: dict[str, str] = {}
    for difficulty in range(1, env.max_difficulty + 1):
        for split in SPLITS:
            for task in _draws(env, split, difficulty, draws, seed):
                problem = key(task.params)
                if owner.setdefault(problem, split) != split:
                    raise AssertionError(
                        f"problem of task {task.id} (difficulty {difficulty}) is in both "
                        f"{owner[problem]} and {split}: {problem[:120]}"
                    )
    distinct = {split: sum(s == split for s in owner.values()) for split in SPLITS}
    return (
        f"{draws} draws per split at each of {env.max_difficulty} difficulties; distinct problems "
        + ", ".join(f"{split} {distinct[split]}" for split in SPLITS)
        + "; none in two splits"
    )


def _draws(env: Env, split: Split, difficulty: int, draws: int, seed: int) -> list[Task]:
    size = min(draws, 200)
    while True:
        try:
            first = env.tasks(split, size, seed=seed, difficulty=difficulty)
            break
        except ValueError:
            if size == 1:
                raise
            size //= 2
    drawn = list(first)
    call = 1
    while len(drawn) < draws:
        drawn += env.tasks(split, size, seed=seed + call, difficulty=difficulty)
        call += 1
    return drawn[:draws]
