"""Executable skills: tool-call procedures mined from verified successes, offered as tools.

Every run of two or more consecutive calls in a verified successful training episode is a
candidate procedure. Its constants are abstracted: an argument equal to an earlier call's result
becomes a reference to that result (``multiply(a=<result of add>)``), any other becomes a
parameter of the skill, and a value that every one of three or more instances shares stays
fixed. Procedures of the same shape are one candidate, ranked by how many distinct problems
contain it. A candidate is admitted only after it runs successfully on the run's own verified
episodes: in each verified success that contains it, the skill replaces the part of the
episode's calls it matches (same tools, same flow of results), and the episode, played again
on its task in a fresh world through the real harness with the skill on offer, must pass
without an error step. The env's oracle is never asked. Admitted skills are named after their
tools, deduplicated, capped, and kept in ``agent.json`` as data
(:class:`~ratchet.core.memory.Skill`); the harness offers the most relevant ones per task.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.env import Env, format_result
from ratchet.core.memory import Skill, SkillStep
from ratchet.core.task import member_of
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Step, Trajectory, tool_steps
from ratchet.engine.harness import Budget, run_episode, scripted
from ratchet.engine.skills import bind, parse_result
from ratchet.improve.levers.base import LeverContext, NoCandidate

_FIXED_AFTER = 3  # instances that must agree before a value stays fixed instead of a parameter


@dataclass(frozen=True)
class SkillLever:
    """Propose the incumbent plus skills mined from successes and admitted by running them.

    Attributes:
        max_skills: Most skills an agent keeps (the best supported win).
        min_calls: Fewest calls in a skill.
        max_calls: Most calls in a skill.
        trials: Candidate skills tested per proposal (the best supported first).
        checks: Verified episodes of the run each candidate is run in.
        min_checks: Fewest episodes it must have run in (all successfully) to be admitted.
    """

    max_skills: int = 8
    min_calls: int = 2
    max_calls: int = 6
    trials: int = 12
    checks: int = 4
    min_checks: int = 2
    name: str = "skills"

    def propose(self, context: LeverContext) -> Agent | None:
        """Return the candidate.

        Raises:
            NoCandidate: When no new skill was admitted (saying which failed their checks).
        """
        env, incumbent = context.env, context.incumbent
        successes = [
            t
            for t in context.experience
            if t.passed and not t.errors and t.error is None and t.task.env == env.name
        ]
        known = {procedure(skill) for skill in incumbent.skills}
        found = mine(successes, self.min_calls, self.max_calls)
        found = [skill for skill in found if procedure(skill) not in known]
        admitted, rejected = [], []
        for skill in found[: self.trials]:
            passed, tried = check_skill(env, skill, successes, self.checks)
            if tried >= self.min_checks and passed == tried:
                admitted.append(skill)
            else:
                rejected.append(f"{skill.name}: {passed}/{tried} verified episodes")
        if not admitted:
            why = "; ".join(rejected) or (
                f"no procedure of {self.min_calls}+ calls mined beyond the {len(known)} known"
            )
            raise NoCandidate(f"no skill admitted ({why})")
        skills = merge(incumbent.skills, admitted, self.max_skills)
        if skills == incumbent.skills:
            raise NoCandidate("the admitted skills are already in the library")
        return incumbent.derive(
            context.version,
            self.name,
            skills=skills,
            notes={
                "skills_admitted": [s.name for s in admitted],
                "skills_rejected": rejected,
            },
        )


@dataclass
class _Shape:
    """The instances of one abstracted procedure found in the successes."""

    plan: list[tuple[str, dict[str, dict[str, Any]]]]
    env: str
    values: list[list[Any]] = field(default_factory=list)
    problems: set[str] = field(default_factory=set)
    families: set[str] = field(default_factory=set)
    difficulty: int = sys.maxsize
    examples: list[str] = field(default_factory=list)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)


def mine(successes: Sequence[Trajectory], min_calls: int = 2, max_calls: int = 6) -> list[Skill]:
    """Abstract every run of ``min_calls`` to ``max_calls`` calls in ``successes`` into a skill.

    Returns:
        One skill per procedure, the most widely used first (then the longest).
    """
    shapes: dict[tuple[str, str], _Shape] = {}  # by plan, then env (a suite's member)
    for trajectory in successes:
        if trajectory.given_turns:
            continue  # a client of ratchet serve wrote some of its calls: not the agent's procedure
        calls = [s for s in tool_steps(trajectory.steps) if s.call is not None]
        for window in _windows(calls, min_calls, max_calls):
            plan, values = abstract(window)
            task = trajectory.task
            key = (json.dumps(plan, sort_keys=True), member_of(task))
            shape = shapes.setdefault(key, _Shape(plan, member_of(task)))
            if task.problem in shape.problems:
                continue
            shape.problems.add(task.problem)
            shape.values.append(values)
            shape.families.add(task.family)
            shape.difficulty = min(shape.difficulty, task.difficulty)
            shape.examples.append(task.instruction)
            shape.schemas.update(_tool_schemas(trajectory.tools))
    ranked = sorted(
        shapes.items(), key=lambda item: (-len(item[1].problems), -len(item[1].plan), item[0])
    )
    return [_skill(shape, shape.env) for _, shape in ranked]


def _windows(calls: Sequence[Step], shortest: int, longest: int) -> Iterator[Sequence[Step]]:
    for start in range(len(calls)):
        for end in range(start + shortest, min(len(calls), start + longest) + 1):
            yield calls[start:end]


def abstract(steps: Sequence[Step]) -> tuple[list[tuple[str, dict[str, Any]]], list[Any]]:
    """A run of calls as a plan with numbered parameters ``p0, p1, ...``, and their values.

    An argument equal to an earlier call's result (its text, its JSON, or a field of its JSON
    object) refers to that result, the latest one first; every other argument is a parameter.
    """
    plan: list[tuple[str, dict[str, Any]]] = []
    values: list[Any] = []
    for index, step in enumerate(steps):
        assert step.call is not None
        arguments: dict[str, Any] = {}
        for name, value in sorted(step.call.arguments.items()):
            source = _result_source(value, steps[:index])
            if source is None:
                source = {"param": f"p{len(values)}"}
                values.append(value)
            arguments[name] = source
        plan.append((step.call.name, arguments))
    return plan, values


def _result_source(value: Any, earlier: Sequence[Step]) -> dict[str, Any] | None:
    if value in ("", None) or isinstance(value, bool):
        return None
    for index in range(len(earlier) - 1, -1, -1):
        text = earlier[index].observation.text
        if isinstance(value, str) and value == text:
            return {"result": index}
        parsed = parse_result(text)
        if not isinstance(value, str) and same(value, parsed):
            return {"result": index, "json": True}
        if isinstance(parsed, dict):
            for key, item in parsed.items():
                if same(value, item):
                    return {"result": index, "field": key}
    return None


def same(a: Any, b: Any) -> bool:
    """Whether two argument values are equal (numbers by value, anything else exactly)."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers):
        if isinstance(a, bool) or isinstance(b, bool):
            return a is b
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)
    return bool(type(a) is type(b) and a == b)


def _skill(shape: _Shape, env: str) -> Skill:
    """Name the parameters, fix the values every instance shares, and describe the skill."""
    parameters: dict[str, dict[str, Any]] = {}
    steps = []
    for number, (tool, arguments) in enumerate(shape.plan, start=1):
        bound: dict[str, dict[str, Any]] = {}
        for argument, source in arguments.items():
            if "param" not in source:
                bound[argument] = source
                continue
            position = int(source["param"][1:])
            column = [values[position] for values in shape.values]
            if len(column) >= _FIXED_AFTER and all(same(v, column[0]) for v in column):
                bound[argument] = {"value": column[0]}
                continue
            name = next(
                n
                for n in (argument, f"{tool}_{argument}", f"{tool}_{argument}_{number}")
                if n not in parameters
            )
            schema = dict(shape.schemas.get(tool, {}).get(argument, {}))
            described = f"{argument} of {tool} (step {number})"
            if schema.get("description"):
                described += f": {schema['description']}"
            parameters[name] = {**schema, "description": described}
            bound[argument] = {"param": name}
        steps.append(SkillStep(tool, bound))
    return Skill(
        name=_name([tool for tool, _ in shape.plan]),
        description=_description(steps),
        env=env,
        parameters=parameters,
        steps=tuple(steps),
        families=tuple(sorted(shape.families)),
        difficulty=shape.difficulty,
        support=len(shape.problems),
        examples=tuple(shape.examples[:3]),
    )


def _name(tools: Sequence[str]) -> str:
    name = "_then_".join(tools)
    return name if len(name) <= 60 else f"{tools[0]}_then_{len(tools) - 1}_more"[:60]


def _description(steps: Sequence[SkillStep]) -> str:
    def show(source: dict[str, Any]) -> str:
        if "param" in source:
            return str(source["param"])
        if "value" in source:
            return json.dumps(source["value"])
        where = f"the result of step {int(source['result']) + 1}"
        return f"field {source['field']!r} of {where}" if "field" in source else where

    calls = [
        f"{step.tool}({', '.join(f'{k}={show(v)}' for k, v in step.arguments.items())})"
        for step in steps
    ]
    return (
        "A skill learned from solved tasks: runs "
        + ", then ".join(calls)
        + " in one call, and stops at the first error."
    )


def _tool_schemas(tools: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    schemas = {}
    for tool in tools:
        function = tool.get("function", tool)
        properties = (function.get("parameters") or {}).get("properties") or {}
        schemas[str(function.get("name"))] = properties
    return schemas


def match(skill: Skill, steps: Sequence[Step]) -> dict[str, Any] | None:
    """The skill's arguments if ``steps`` are exactly its calls with some arguments, else ``None``.

    The tools, their argument names, the fixed values and the flow of results must agree.
    """
    if len(steps) != len(skill.steps):
        return None
    arguments: dict[str, Any] = {}
    for index, (planned, step) in enumerate(zip(skill.steps, steps, strict=True)):
        call = step.call
        if (
            call is None
            or call.name != planned.tool
            or set(call.arguments) != set(planned.arguments)
        ):
            return None
        for name, source in planned.arguments.items():
            value = call.arguments[name]
            if "param" in source:
                arguments[source["param"]] = value
                continue
            try:
                expected = bind(source, arguments, steps[:index])
            except (KeyError, IndexError, TypeError, ValueError):
                return None
            # Loosely: a result passed on as text or as a number is the same flow of data.
            if not (same(value, expected) or format_result(value) == format_result(expected)):
                return None
    return arguments


def check_skill(
    env: Env, skill: Skill, episodes: Sequence[Trajectory], checks: int
) -> tuple[int, int]:
    """Run ``skill`` in up to ``checks`` of ``episodes`` (verified successes), one per problem.

    An episode qualifies when part of its calls matches the skill; the skill replaces that
    part, and the episode is played again on its task, in a fresh world, by the harness with
    the skill on offer: it must pass with no error step. Nothing but the episodes' own calls
    is used (never the env's oracle).

    Returns:
        ``(passed, tried)``.
    """
    passed = tried = 0
    seen: set[str] = set()
    for episode in episodes:
        if tried >= checks:
            break
        if not episode.passed or episode.task.env != env.name or episode.task.problem in seen:
            continue
        plan = _substitute(skill, [s for s in tool_steps(episode.steps) if s.call is not None])
        if plan is None:
            continue
        seen.add(episode.task.problem)
        tried += 1
        budget = Budget(max_turns=len(plan), max_episode_tokens=sys.maxsize, timeout_s=math.inf)
        player = Agent(version="skill-check", model="scripted")
        played = run_episode(env, episode.task, player, scripted(plan), budget, skills=(skill,))
        passed += played.passed and not played.errors
    return passed, tried


def _substitute(skill: Skill, calls: Sequence[Step]) -> list[ToolCall] | None:
    """An episode's calls with the first run matching ``skill`` replaced by one skill call."""
    width = len(skill.steps)
    for start in range(len(calls) - width + 1):
        arguments = match(skill, calls[start : start + width])
        if arguments is not None:
            before = [s.call for s in calls[:start] if s.call is not None]
            after = [s.call for s in calls[start + width :] if s.call is not None]
            return [*before, ToolCall(skill.name, arguments), *after]
    return None


def merge(kept: Sequence[Skill], new: Sequence[Skill], limit: int) -> tuple[Skill, ...]:
    """Kept and new skills, one per procedure, the best supported ``limit``, names unique."""
    unique: dict[str, Skill] = {}
    for skill in (*kept, *new):
        unique.setdefault(procedure(skill), skill)
    chosen = sorted(unique.values(), key=lambda s: -s.support)[: max(0, limit)]
    named: list[Skill] = []
    taken: set[str] = set()
    for skill in chosen:
        name, suffix = skill.name, 2
        while name in taken:
            name, suffix = f"{skill.name}_{suffix}", suffix + 1
        taken.add(name)
        named.append(replace(skill, name=name))
    return tuple(named)


def procedure(skill: Skill) -> str:
    """What makes two skills the same: their calls and argument sources, not their names."""
    return json.dumps([[step.tool, step.arguments] for step in skill.steps], sort_keys=True)
