"""The env a source and its forged tasks make: gold-replay verification, oracle, hindsight.

A task's params name its world and its normalised walk (``calls``) or its question (``ask``).
The verifier replays the walk on a fresh copy of the world and compares the session's final
state with it cell by cell, as ``shop`` compares databases: every cell either changed must
agree, so a missing change and an extra one both fail. A question leaves the state as it was,
and its answer must be the value the read gives, one the session's own reads showed (a lucky
guess from a closed set does not pass). ``describe`` names what an episode's valid calls
achieved as a task of the same kind, for hindsight relabelling.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from ratchet.core.env import FINISH, SimpleEnv, format_result
from ratchet.core.pool import TaskPool
from ratchet.core.task import Task, TaskSpec
from ratchet.core.tool import Tool, ToolCall
from ratchet.core.trajectory import Observation, Trajectory
from ratchet.core.verdict import Verdict
from ratchet.forge.source import Source
from ratchet.forge.state import Cells, cells, differences
from ratchet.forge.tasks import action_spec, question_spec
from ratchet.forge.walks import (
    Ran,
    answerable,
    as_tools,
    calls_of,
    judge_walk,
    normalise,
    problem_key,
    replay,
)
from ratchet.integrations.dataset import exact_match, numeric_match

W = TypeVar("W")

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")

PARAMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "world": {"type": "integer", "minimum": 0},
        "calls": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
                "required": ["name", "arguments"],
            },
        },
    },
    "required": ["world", "calls"],
}


@dataclass
class Played(Generic[W]):
    """One session's world and the results its calls returned.

    Attributes:
        world: The source's world.
        shown: Every result the session's tools returned, in order.
    """

    world: W
    shown: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Expected:
    """What a task's walk leaves behind.

    Attributes:
        cells: The final state of the walk's replay.
        answer: The value a question's read gives (``None`` for an action task).
    """

    cells: Cells
    answer: str | None


def matches(answer: str, expected: str) -> bool:
    """Whether ``answer`` states ``expected``: exactly, or as the one number it is."""
    if _NUMBER.fullmatch(expected.strip()):
        return numeric_match(answer, expected)
    return exact_match(answer, expected)


def forged_env(
    source: Source[W], pool: TaskPool, version: str, reads: Collection[str]
) -> SimpleEnv[Played[W]]:
    """The env of ``source``'s world and tools with the forged task ``pool``.

    Args:
        source: The world and its tools.
        pool: The forged tasks.
        version: The env's version (the forged content's hash).
        reads: The read tools questions may ask (hindsight names questions about these only).
    """
    tools_of = functools.cache(functools.partial(_tools, source))

    @functools.lru_cache(maxsize=8192)
    def expected(params_json: str) -> Expected:
        params = json.loads(params_json)
        calls = calls_of(params.get("calls") or [params["ask"]])
        runs, start = replay(source, params["world"], calls)
        failed = next((r for r in runs if r.error is not None), None)
        if failed is not None:
            raise ValueError(f"the task's walk fails at {failed.call.name}: {failed.error}")
        if "ask" in params:
            return Expected(start, runs[0].result)
        return Expected(runs[-1].after, None)

    def gold(task: Task) -> Expected:
        return expected(json.dumps(_walk_params(source, task.params), sort_keys=True))

    def build(task: Task) -> Played[W]:
        return Played(source.open(_walk_params(source, task.params)["world"]))

    def verify(task: Task, played: Played[W], answer: str | None) -> Verdict:
        want = gold(task)
        differing = differences(want.cells, cells(source.state(played.world)))
        if differing:
            return Verdict.of(
                False,
                "the state differs from the expected outcome:\n" + "\n".join(differing),
                differing_cells=float(len(differing)),
            )
        if want.answer is None:
            return Verdict.of(True, "the state matches the expected outcome")
        if answer is None or not matches(answer, want.answer):
            return Verdict.of(False, "the answer is not the value asked for")
        if not any(matches(result, want.answer) for result in played.shown):
            return Verdict.of(False, "the answer states a value the session never read")
        return Verdict.of(True, "the answer is the value asked for")

    def oracle(task: Task) -> list[ToolCall]:
        params = _walk_params(source, task.params)
        if "ask" in params:
            answer = gold(task).answer or ""
            return [*calls_of([params["ask"]]), ToolCall(FINISH, {"answer": answer})]
        return [*calls_of(params["calls"]), ToolCall(FINISH, {"answer": "done"})]

    def describe(trajectory: Trajectory) -> TaskSpec | None:
        index = trajectory.task.params.get("world")
        calls = [call for call in trajectory.calls if call.name != FINISH]
        if not isinstance(index, int) or not calls:
            return None
        return _achieved(source, tools_of(), reads, index, calls)

    def from_params(params: dict[str, Any]) -> TaskSpec:
        checked = _walk_params(source, params)
        if "calls" not in checked:
            raise ValueError("proposed params need 'calls': the state-changing calls, in order")
        calls = calls_of(checked["calls"])
        spec = _achieved(source, tools_of(), reads, checked["world"], calls)
        if spec is None or "calls" not in spec.params or len(spec.params["calls"]) != len(calls):
            raise ValueError("every proposed call must succeed and change the state for good")
        return spec

    return SimpleEnv(
        name=source.name,
        description=source.description,
        sample=pool,
        build=build,
        tools=lambda played: _recording(source.tools(played.world), played),
        verify=verify,
        oracle=oracle,
        describe=describe,
        policy=source.policy,
        version=version,
        teardown=functools.partial(_close, source) if source.close else None,
        problem_key=problem_key,
        thread_safe=source.thread_safe,
        task_from_params=from_params,
        params_schema=PARAMS_SCHEMA,
    )


def _tools(source: Source[Any]) -> dict[str, Tool]:
    """The tools as world 0 offers them (every world offers the same schemas)."""
    world = source.open(0)
    try:
        return {tool.name: tool for tool in as_tools(source.tools(world))}
    finally:
        if source.close is not None:
            source.close(world)


def _close(source: Source[W], played: Played[W]) -> None:
    if source.close is not None:
        source.close(played.world)


def _walk_params(source: Source[Any], params: dict[str, Any]) -> dict[str, Any]:
    """The params with their world checked.

    Raises:
        ValueError: If ``world`` is not a world of the source or neither ``calls`` nor
            ``ask`` is given.
    """
    index = params.get("world")
    if not isinstance(index, int) or not 0 <= index < source.worlds:
        raise ValueError(f"params need a 'world' in 0..{source.worlds - 1}; got {index!r}")
    if ("calls" in params) == ("ask" in params):
        raise ValueError("params need exactly one of 'calls' (a walk) and 'ask' (a question)")
    return params


def _recording(tools: Sequence[Any], played: Played[Any]) -> list[Tool]:
    """The tools, each recording what it returned in ``played.shown``."""

    def wrap(tool: Tool) -> Tool:
        def call(**arguments: Any) -> Any:
            result = tool.fn(**arguments)
            text = result.text if isinstance(result, Observation) else format_result(result)
            played.shown.append(text)
            return result

        return replace(tool, fn=call)

    return [wrap(tool) for tool in as_tools(tools)]


def _achieved(
    source: Source[Any],
    tools: dict[str, Tool],
    reads: Collection[str],
    index: int,
    calls: Sequence[ToolCall],
) -> TaskSpec | None:
    """The task ``calls`` solve in world ``index``: their lasting changes, else their last read."""
    runs, start = replay(source, index, calls)
    if any(r.error is not None and r.changed for r in runs):
        return None
    writes: list[Ran] = [r for r in runs if r.error is None and r.changed]
    if writes:
        if judge_walk(writes, start) is not None:
            return None
        walk = normalise(source, index, writes)
        return action_spec(source.templates, tools, index, writes, walk)
    asked = [r for r in runs if r.call.name in reads and r.error is None and answerable(r.result)]
    if not asked:
        return None
    return question_spec(source.templates, tools, index, asked[-1].call)
