"""Conformance checks every env must pass before agents practise on it.

The null rule: a policy that does nothing (``finish("")``) and one that only claims success must
not *pass* any task, and must score below the oracle on each; a verifier may give partial
credit (for format, say) as long as doing nothing never looks like solving the task. A task
whose correct outcome is to do nothing declares it (``noop_correct``) and is left out of
that rule. Every task is checked and every failure counted, so one odd task does not hide the
rest.

A red-team finding can be accepted knowingly, with a reason (a ported benchmark keeps its own
reward rule, holes included): the env declares it (``accepted_findings``, see
:func:`ratchet.core.env.accepted_findings_of`) or the caller passes it (``accept``). The check
is then reported as accepted, with its finding and the reason, and no longer fails the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ratchet.core.env import (
    FINISH,
    Env,
    TooFewTasks,
    accepted_findings_of,
    draw_tasks,
    left_out,
    problem_key_of,
)
from ratchet.core.serialise import to_dict
from ratchet.core.task import SPLITS, Split, Task, wording_key
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory
from ratchet.core.verdict import FORGED_CLAIM as FORGED_CLAIM  # its old home, kept importable
from ratchet.engine.harness import replay
from ratchet.envs.redteam import red_team_checks


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one conformance check.

    Attributes:
        name: Short name of the check.
        passed: Whether it held.
        detail: What was measured, or what went wrong.
        accepted: Why a red-team finding (a failed red-team check) is accepted knowingly;
            ``None`` if it is not.
    """

    name: str
    passed: bool
    detail: str
    accepted: str | None = None


@dataclass(frozen=True)
class CheckReport:
    """All conformance checks for one env.

    Attributes:
        env: The env's name.
        results: One entry per check, in the order run.
        left_out: The optional env members the env leaves out, so their defaults apply (see
            :class:`~ratchet.core.env_defaults.EnvDefaults`); information, never a failure.
    """

    env: str
    results: tuple[CheckResult, ...]
    left_out: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Whether every check held or is an accepted red-team finding."""
        return all(r.passed or r.accepted is not None for r in self.results)

    @property
    def accepted(self) -> tuple[CheckResult, ...]:
        """The red-team findings accepted knowingly."""
        return tuple(r for r in self.results if r.accepted is not None)

    def text(self) -> str:
        """The report as plain text: one line per check, then the outcome."""
        lines = [f"{'pass' if r.passed else 'FAIL'}  {r.name}: {r.detail}" for r in self.results]
        if self.left_out:
            lines.append(f"note  {self.left_out_line()}")
        failed = sum(not r.passed for r in self.results)
        outcome = f"{self.env} fails {failed} of {len(self.results)} checks"
        lines.append(f"{self.env} passes all {len(self.results)} checks" if not failed else outcome)
        return "\n".join(lines)

    def left_out_line(self) -> str:
        """The optional members left out, as one informational line (``""`` if none)."""
        if not self.left_out:
            return ""
        return f"optional members left out (their defaults apply): {', '.join(self.left_out)}"


def check_env(
    env: Env,
    n: int = 200,
    seed: int = 0,
    split_draws: int = 50,
    accept: Mapping[str, str] | None = None,
) -> CheckReport:
    """Run the conformance checks on ``env``.

    Checks: ``n`` distinct test tasks can be drawn; tool schemas are valid; tasks and episodes
    are deterministic; the oracle scores 1.0 on every test task; a null policy and a policy
    that only claims success pass none and score below the oracle (the null rule above); bad
    actions come back as error observations; no problem (by problem key) appears in two of the
    ``train``, ``probe`` and ``test`` splits over ``split_draws`` draws per split at every
    difficulty; and every attack of the red-team battery (:mod:`ratchet.envs.redteam`) fails,
    one check per attack. A check that raises is reported as failed with the exception, never
    propagated; when no test tasks can be drawn, the checks that need them are reported as not
    run. The optional env members the env leaves out are named in the report, not checked.

    Args:
        env: The env.
        n: Test tasks to check on.
        seed: Seed of the draws.
        split_draws: Tasks drawn per split and difficulty for the split check.
        accept: Red-team findings accepted knowingly, check name to reason, besides those the
            env declares (see the module docstring).

    Raises:
        ValueError: If a finding to accept is not a red-team check, or its reason is empty.
    """
    accepted = _acceptances(env, accept)
    drawn, tasks = _test_tasks(env, n, seed)
    oracle = _OracleRuns(env)
    on_tasks: list[tuple[str, Callable[[], str]]] = [
        ("tool schemas", lambda: _schemas(env, tasks[0])),
        ("determinism", lambda: _determinism(env, tasks[: min(20, n)], n, seed)),
        ("oracle scores 1", lambda: oracle.all_solved(tasks)),
        ("null scores below the oracle", lambda: _below(oracle, tasks, _null, "null")),
        ("forged claim scores below the oracle", lambda: _below(oracle, tasks, _forge, "forged")),
        ("bad actions are observations", lambda: _bad_actions(env, tasks[0])),
    ]
    results = [drawn, *(_run(name, run, tasks) for name, run in on_tasks)]
    results.append(_run("splits disjoint by problem", lambda: check_splits(env, split_draws, seed)))
    for name, run in red_team_checks(env, tasks):
        result = _run(name, run, tasks)
        reason = accepted.get(name)
        if reason is not None and not result.passed:
            result = replace(result, accepted=reason)
        elif reason is not None:
            result = replace(result, detail=f"{result.detail} (accepted, but nothing got through)")
        results.append(result)
    return CheckReport(env.name, tuple(results), left_out(env))


def _acceptances(env: Env, given: Mapping[str, str] | None) -> dict[str, str]:
    """The env's accepted findings and ``given``, checked against the red-team battery."""
    accepted = {**accepted_findings_of(env), **(given or {})}
    known = [name for name, _ in red_team_checks(env, [])]
    for name, reason in accepted.items():
        if name not in known:
            raise ValueError(
                f"only red-team findings can be accepted, and {name!r} is not one; "
                f"they are: {', '.join(known)}"
            )
        if not reason.strip():
            raise ValueError(f"accepting {name!r} needs a reason")
    return accepted


def _run(name: str, run: Callable[[], str], tasks: list[Task] | None = None) -> CheckResult:
    """Run one check; ``tasks`` empty (not ``None``) means it needs test tasks there are none of."""
    if tasks is not None and not tasks:
        return CheckResult(name, False, "not run: no test tasks to run it on")
    try:
        return CheckResult(name, True, run())
    except Exception as exc:  # a broken env is reported, not propagated
        return CheckResult(name, False, f"{type(exc).__name__}: {exc}")


def _test_tasks(env: Env, n: int, seed: int) -> tuple[CheckResult, list[Task]]:
    name = "test tasks"
    try:
        tasks = draw_tasks(env, "test", n, seed=seed)
    except TooFewTasks as exc:  # check what there is, but say so
        return CheckResult(name, False, str(exc)), exc.returned
    except Exception as exc:  # a small pool or a broken sampler is a finding, not a crash
        return CheckResult(name, False, f"could not draw {n} test tasks: {exc}"), []
    problems = {task.problem or problem_key_of(env)(task.params) for task in tasks}
    if len(tasks) != n or len(problems) != len(tasks):
        detail = f"asked for {n} distinct test tasks; got {len(tasks)} holding {len(problems)}"
        return CheckResult(name, False, detail), tasks
    return CheckResult(name, True, f"{n} distinct test problems drawn"), tasks


def _finish(answer: str) -> ToolCall:
    return ToolCall(FINISH, {"answer": answer})


def _forge(task: Task) -> list[ToolCall]:
    return [_finish(FORGED_CLAIM)]


def _null(task: Task) -> list[ToolCall]:
    return [_finish("")]


class _OracleRuns:
    """The oracle's score on each task, replayed once and shared by the checks that need it."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self._runs: dict[str, Trajectory] = {}

    def run(self, task: Task) -> Trajectory:
        if task.id not in self._runs:
            self._runs[task.id] = replay(self.env, task, self.env.oracle(task))
        return self._runs[task.id]

    def all_solved(self, tasks: list[Task]) -> str:
        failed = [(task, self.run(task)) for task in tasks]
        failed = [(task, t) for task, t in failed if t.score != 1.0]
        if failed:
            raise AssertionError(
                f"{len(failed)}/{len(tasks)} test tasks did not score 1: "
                + _examples((task, f"scored {t.score:g}", t) for task, t in failed)
            )
        return f"{len(tasks)}/{len(tasks)} test tasks scored 1"


def _below(
    oracle: _OracleRuns, tasks: list[Task], policy: Callable[[Task], list[ToolCall]], what: str
) -> str:
    judged = [task for task in tasks if not task.noop_correct]
    exempt = len(tasks) - len(judged)
    if not judged:
        raise AssertionError(
            f"all {len(tasks)} test tasks declare doing nothing correct: the rule is unchecked"
        )
    bad, scores = [], []
    for task in judged:
        trajectory = replay(oracle.env, task, policy(task))
        best = oracle.run(task).score
        scores.append(trajectory.score)
        if trajectory.passed or trajectory.score >= best:
            verdict = "passed" if trajectory.passed else f"scored {trajectory.score:g}"
            bad.append((task, f"{verdict} (oracle {best:g})", trajectory))
    if bad:
        raise AssertionError(
            f"the {what} policy passed or matched the oracle on {len(bad)}/{len(judged)} "
            f"test tasks: " + _examples(bad)
        )
    mean = sum(scores) / len(scores)
    note = f"; {exempt} tasks declare doing nothing correct" if exempt else ""
    judged_count = f"{len(judged)}/{len(judged)}"
    return f"{judged_count} test tasks failed, below the oracle (mean {mean:.2f}){note}"


def _examples(failures: Iterable[tuple[Task, str, Trajectory]], shown: int = 3) -> str:
    items = list(failures)
    text = "; ".join(
        f"task {task.id} {outcome}: "
        + (trajectory.verdict.feedback[:120] if trajectory.verdict else trajectory.error or "")
        for task, outcome, trajectory in items[:shown]
    )
    return text + (f"; and {len(items) - shown} more" if len(items) > shown else "")


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
    """Draw ``draws`` tasks per split at each difficulty; no problem may be in two splits.

    A problem is in two splits when its problem key is, and also when two tasks of different
    splits read the same (the instruction, case and spacing aside) and the oracle solves them
    the same way: one problem under two keys (a benchmark port that copied test questions into
    training under other params). The worlds may differ: one program over hidden files is one
    problem, since a training episode replayed on a test task passes it. Instructions worded
    alike in two splits but solved differently (the oracle's plan depends on the world), or
    whose solution the words spell out in full, give nothing away; they are counted in what is
    returned.

    Returns what was drawn, naming the splits that hold no problem at some difficulty (a
    benchmark's own dev split may lack its hardest level).

    Raises:
        AssertionError: Naming a problem found in two splits.
        ValueError: If a split holds no problem at any difficulty.
        TooFewTasks: If the env returned fewer tasks than asked without raising.

    Each call asks for up to 200 distinct tasks; a split with fewer problems than that at some
    difficulty is asked for fewer (down to one), and the draws repeat over seeds.
    """
    key = problem_key_of(env)
    owner: dict[str, str] = {}
    lacking: dict[Split, list[int]] = {split: [] for split in SPLITS}
    worded = _Wordings(env)
    for difficulty in range(1, env.max_difficulty + 1):
        for split in SPLITS:
            drawn = _draws(env, split, difficulty, draws, seed)
            if not drawn:
                lacking[split].append(difficulty)
            for task in drawn:
                problem = key(task.params)
                if owner.setdefault(problem, split) != split:
                    raise AssertionError(
                        f"problem of task {task.id} (difficulty {difficulty}) is in both "
                        f"{owner[problem]} and {split}: {problem[:120]}"
                    )
                worded.add(task)
    empty = [split for split, levels in lacking.items() if len(levels) == env.max_difficulty]
    if empty:
        raise ValueError(f"no problem at any difficulty in split {', '.join(empty)}")
    distinct = {split: sum(s == split for s in owner.values()) for split in SPLITS}
    gaps = "; ".join(
        f"{split} holds none at difficulty {', '.join(map(str, levels))}"
        for split, levels in lacking.items()
        if levels
    )
    alike = len(worded.alike)
    return (
        f"{draws} draws per split at each of {env.max_difficulty} difficulties; distinct problems "
        + ", ".join(f"{split} {distinct[split]}" for split in SPLITS)
        + "; none in two splits"
        + (f"; {gaps}" if gaps else "")
        + (f"; {alike} instruction{'s' * (alike != 1)} worded alike in two splits" if alike else "")
        + (" (solved differently, or spelled out in full)" if alike else "")
    )


class _Wordings:
    """The first task of each normalised instruction, and the instructions seen in two splits."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.first: dict[str, dict[str, Task]] = {}
        self.alike: set[str] = set()
        self._plans: dict[str, str | None] = {}

    def add(self, task: Task) -> None:
        """Record ``task``; raise if one of another split read the same and is the same problem."""
        text = wording_key(task.instruction)
        by_split = self.first.setdefault(text, {})
        if task.split in by_split:
            return
        plan = self._plan(task)
        for earlier in by_split.values():
            if plan is not None and plan == self._plan(earlier) and not _spelled_out(plan, text):
                raise AssertionError(
                    f"tasks {earlier.id} ({earlier.split}) and {task.id} ({task.split}) read "
                    f"the same ({task.instruction[:80]!r}) and have the same solution, under "
                    "two problem keys: one problem in two splits"
                )
        if by_split:
            self.alike.add(text)
        by_split[task.split] = task

    def _plan(self, task: Task) -> str | None:
        if task.id not in self._plans:
            try:
                calls = self.env.oracle(task)
                plan: str | None = json.dumps([[c.name, c.arguments] for c in calls], default=str)
            except Exception:  # an oracle that fails here tells nothing about the wording
                plan = None
            self._plans[task.id] = plan
        return self._plans[task.id]


def _spelled_out(plan: str, text: str) -> bool:
    """Whether every argument of the plan is written in the (normalised) instruction."""
    calls = json.loads(plan)
    values = [value for _, arguments in calls for value in arguments.values()]
    return all(
        isinstance(value, str | int | float) and str(value).casefold() in text for value in values
    )


def _draws(env: Env, split: Split, difficulty: int, draws: int, seed: int) -> list[Task]:
    """``draws`` tasks of ``split`` at ``difficulty`` over several calls; none if it holds none."""
    size = min(draws, 200)
    while True:
        try:
            first = draw_tasks(env, split, size, seed=seed, difficulty=difficulty)
            break
        except ValueError:
            if size == 1:
                return []
            size //= 2
    drawn = list(first)
    call = 1
    while len(drawn) < draws:
        drawn += draw_tasks(env, split, size, seed=seed + call, difficulty=difficulty)
        call += 1
    return drawn[:draws]
