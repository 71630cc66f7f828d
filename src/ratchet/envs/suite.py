"""A suite: several envs practised as one, so one ``ratchet improve`` run trains on them all.

``ratchet improve calc,grid`` (or ``load_env_reference("calc,grid")``, or ``Suite((calc, grid))``
from Python) builds one env whose tasks are drawn evenly from its members. Every task of a suite
carries its member's name in its params (``{"suite_member": "calc", "params": {...}}``, see
:func:`ratchet.core.task.member_of`), so:

- problem keys stay disjoint across members (``calc:`` + calc's own key), while each task keeps
  the split its member gave it (:meth:`Suite.split_of_params` asks the member), so a suite
  never moves a member's test problem into training;
- families read ``member/family``, so the curriculum weighs each member's families by their own
  success rates and spreads the training budget toward the members on their frontier;
- per-env metrics and the gate's per-env flip budget group episodes by member.

Sessions, oracles, hindsight descriptions, proposed tasks and known attacks are the members'
own, reached through the task's member. The suite's version is a hash of its members' names and
versions, so a run names exactly what it practised on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ratchet.core.env import (
    Attack,
    Describe,
    Env,
    FromParams,
    Session,
    accepted_findings_of,
    attacks_of,
    describer,
    max_sessions_of,
    params_schema_of,
    problem_key_of,
    split_of_params,
    task_builder,
    thread_safe_of,
)
from ratchet.core.task import MEMBER_PARAM, Split, Task, TaskSpec, make_task, member_of
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory

SEPARATOR = ","
"""What joins the members' references in an env reference that names a suite."""


@dataclass(frozen=True)
class Suite:
    """Several envs as one: tasks drawn evenly from the members, each run by its own member.

    Attributes:
        members: The envs, at least two, with distinct names.
        describe: Hindsight through the task's member (``None`` if no member describes).
        task_from_params: Builds a task of the member its params name (``None`` if no member
            builds tasks from params).
        params_schema: One schema per member that builds tasks, as alternatives.
    """

    members: tuple[Env, ...]
    # Derived from the members (bound methods of the suite itself): not in its repr or equality.
    describe: Describe | None = field(init=False, repr=False, compare=False)
    task_from_params: FromParams | None = field(init=False, repr=False, compare=False)
    params_schema: dict[str, Any] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Refuse fewer than two members or one name twice; offer the optional members.

        Raises:
            ValueError: If there are fewer than two members or two share a name.
        """
        for derived in ("describe", "task_from_params", "params_schema"):
            object.__setattr__(self, derived, None)
        names = [member.name for member in self.members]
        if len(names) < 2:
            raise ValueError(f"a suite needs at least two envs; got {', '.join(names) or 'none'}")
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"a suite names each env once; {', '.join(twice)} came twice")
        if any(describer(member) is not None for member in self.members):
            object.__setattr__(self, "describe", self._describe)
        builders = [member for member in self.members if task_builder(member) is not None]
        if builders:
            object.__setattr__(self, "task_from_params", self._task_from_params)
            schemas = [_member_schema(member) for member in builders]
            object.__setattr__(self, "params_schema", {"oneOf": schemas})

    @property
    def name(self) -> str:
        """The members' names joined by commas, as the command line names the suite."""
        return SEPARATOR.join(member.name for member in self.members)

    @property
    def description(self) -> str:
        """One line for listings."""
        return f"suite of {', '.join(m.name for m in self.members)}: tasks drawn evenly from each"

    @property
    def version(self) -> str:
        """A hash of the members' names and versions: any member's change changes it."""
        pinned = "\n".join(f"{member.name}@{member.version}" for member in self.members)
        return hashlib.sha256(pinned.encode()).hexdigest()[:12]

    @property
    def max_difficulty(self) -> int:
        """The highest level of any member (a level only some members have draws from those)."""
        return max(member.max_difficulty for member in self.members)

    @property
    def thread_safe(self) -> bool:
        """Whether every member's sessions may be called from several threads at once."""
        return all(thread_safe_of(member) for member in self.members)

    @property
    def max_sessions(self) -> int | None:
        """The smallest limit of open sessions any member sets (``None``: none sets one)."""
        limits = [limit for m in self.members if (limit := max_sessions_of(m)) is not None]
        return min(limits, default=None)

    @property
    def accepted_findings(self) -> dict[str, str]:
        """Each member's red-team findings accepted knowingly, its reason naming the member."""
        reasons: dict[str, list[str]] = {}
        for member in self.members:
            for check, reason in accepted_findings_of(member).items():
                reasons.setdefault(check, []).append(f"{member.name}: {reason}")
        return {check: "; ".join(given) for check, given in reasons.items()}

    @property
    def attacks(self) -> tuple[Attack, ...]:
        """Each member's known reward hacks, played on that member's tasks only."""
        return tuple(
            self._attack(member, attack) for member in self.members for attack in attacks_of(member)
        )

    def tasks(
        self, split: Split, n: int, seed: int = 0, difficulty: int | None = None
    ) -> list[Task]:
        """``n`` tasks of ``split``, drawn evenly from the members that have ``difficulty``.

        Each member draws its share with the same seed (as its own ``tasks`` would); the
        members take turns in the list, starting from one the seed picks, so a draw of ``n``
        tasks is a prefix of the draw of ``n + 1`` with the same seed, and one-task draws
        over many seeds reach every member.

        Raises:
            ValueError: If no member has ``difficulty``, or a member's split holds too few
                problems (its message names the member).
        """
        members = [m for m in self.members if difficulty is None or difficulty <= m.max_difficulty]
        if difficulty is not None and (difficulty < 1 or not members):
            raise ValueError(
                f"difficulty for {self.name} must be in 1..{self.max_difficulty}; got {difficulty}"
            )
        start = seed % len(members)
        members = members[start:] + members[:start]
        drawn = []
        for index, member in enumerate(members):
            count = n // len(members) + (index < n % len(members))
            try:
                own = member.tasks(split, count, seed=seed, difficulty=difficulty) if count else []
            except ValueError as exc:
                raise ValueError(f"suite member {member.name}: {exc}") from None
            drawn.append([self._wrap(member, task) for task in own])
        longest = max((len(tasks) for tasks in drawn), default=0)
        return [tasks[i] for i in range(longest) for tasks in drawn if i < len(tasks)]

    def session(self, task: Task) -> Session:
        """A session of the task's member on the member's own task."""
        member, own = self.unwrap(task)
        return member.session(own)

    def oracle(self, task: Task) -> list[ToolCall]:
        """The task's member's solution."""
        member, own = self.unwrap(task)
        return member.oracle(own)

    def problem_key(self, params: dict[str, Any]) -> str:
        """The member's name and the member's own key: disjoint across members."""
        member = self._member(params)
        return f"{member.name}:{problem_key_of(member)(params['params'])}"

    def split_of_params(self, params: dict[str, Any]) -> Split:
        """The split the member gives the problem (its key's hash, or a pool's own split)."""
        return split_of_params(self._member(params), params["params"])

    def unwrap(self, task: Task) -> tuple[Env, Task]:
        """The member that made ``task`` and the task as the member itself drew it.

        Raises:
            ValueError: If the task names no member of this suite.
        """
        member = self._member(task.params)
        spec = TaskSpec(
            task.instruction,
            task.params["params"],
            family=task.family.removeprefix(f"{member.name}/"),
            difficulty=task.difficulty,
            noop_correct=task.noop_correct,
        )
        own = make_task(
            member.name,
            spec,
            difficulty=task.difficulty,
            seed=task.seed,
            problem_key=problem_key_of(member),
            split=task.split,
        )
        return member, own

    def _wrap(self, member: Env, task: Task) -> Task:
        """The suite's task for ``member``'s ``task``: same split, member named in its params."""
        spec = TaskSpec(
            task.instruction, task.params, task.family, task.difficulty, task.noop_correct
        )
        return make_task(
            self.name,
            _suite_spec(member, spec),
            difficulty=task.difficulty,
            seed=task.seed,
            problem_key=self.problem_key,
            split=task.split,
        )

    def _member(self, params: Mapping[str, Any]) -> Env:
        name = params.get(MEMBER_PARAM)
        for member in self.members:
            if member.name == name:
                if not isinstance(params.get("params"), dict):
                    raise ValueError(f"params of a {self.name} task need a 'params' object")
                return member
        raise ValueError(
            f"params name no member of suite {self.name} (their {MEMBER_PARAM!r} is {name!r})"
        )

    def _describe(self, trajectory: Trajectory) -> TaskSpec | None:
        """What the episode achieved, as its member describes it, as a task of the suite."""
        member, own = self.unwrap(trajectory.task)
        describe = describer(member)
        if describe is None:
            return None
        spec = describe(replace(trajectory, task=own))
        return None if spec is None else _suite_spec(member, spec)

    def _task_from_params(self, params: dict[str, Any]) -> TaskSpec:
        """The task of the member ``params`` names, built by that member from its own params."""
        member = self._member(params)
        build = task_builder(member)
        if build is None:
            raise ValueError(f"suite member {member.name} builds no task from params")
        return _suite_spec(member, build(params["params"]))

    def _attack(self, member: Env, attack: Attack) -> Attack:
        def plans(task: Task) -> list[list[ToolCall]]:
            if member_of(task) != member.name:
                return []
            return attack.plans(self.unwrap(task)[1])

        return Attack(f"{member.name}: {attack.name}", plans)


def _suite_spec(member: Env, spec: TaskSpec) -> TaskSpec:
    """``member``'s task spec as the suite's: the member named in the params and the family."""
    return TaskSpec(
        spec.instruction,
        {MEMBER_PARAM: member.name, "params": spec.params},
        family=f"{member.name}/{spec.family}",
        difficulty=spec.difficulty,
        noop_correct=spec.noop_correct,
    )


def _member_schema(member: Env) -> dict[str, Any]:
    """The JSON schema of params naming ``member`` and holding params of its own."""
    return {
        "type": "object",
        "properties": {
            MEMBER_PARAM: {"const": member.name},
            "params": params_schema_of(member),
        },
        "required": [MEMBER_PARAM, "params"],
        "additionalProperties": False,
    }
