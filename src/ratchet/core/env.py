"""Envs and sessions: the contract every environment implements, and the quickest way to write one.

An env is a family of worlds. ``env.tasks(...)`` draws tasks; ``env.session(task)`` starts an
isolated episode whose ``verify()`` reads the world's own state after the episode, never the
agent's claims; ``env.oracle(task)`` solves a task. Some members are optional:
``describe(trajectory)`` names what an episode achieved (hindsight relabelling; without it an
env simply gets none), ``problem_key(params)`` says what makes two tasks the same problem
(default: the canonical JSON of their params), and ``task_from_params(params)`` builds a task
from hidden params someone else wrote, with ``params_schema`` saying what such params look like
(the ``tasks`` lever proposes practice tasks through them). Most envs are a handful of typed
tool functions over a world object, which :class:`SimpleEnv` turns into a full env (see
``docs/envs.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ratchet.core.task import (
    ProblemKey,
    Sampler,
    Split,
    Task,
    TaskSpec,
    canonical_key,
    generate_tasks,
)
from ratchet.core.tool import Tool, ToolCall, ToolError
from ratchet.core.trajectory import Observation, Trajectory, error_observation
from ratchet.core.verdict import Verdict

FINISH = "finish"


@runtime_checkable
class Session(Protocol):
    """One isolated episode in an env's world."""

    def reset(self) -> Observation:
        """Start the episode; the observation carries the task text and the tool schemas."""
        ...

    def step(self, call: ToolCall) -> Observation:
        """Run one tool call and return what it produced (errors as observations)."""
        ...

    def verify(self) -> Verdict:
        """Judge the world's final state."""
        ...

    def close(self) -> None:
        """Release the world's resources."""
        ...


@runtime_checkable
class Env(Protocol):
    """A family of worlds with a task generator, an oracle and a state-reading verifier.

    Optional members, looked up with ``getattr``: ``describe(trajectory) -> TaskSpec | None``
    (hindsight: the task, in the same world, that the trajectory's actions would solve),
    ``problem_key(params) -> str``, ``task_from_params(params) -> TaskSpec`` (the task those
    hidden params define, worded by the env; raises ``ValueError`` for params that define no
    valid task) and ``params_schema`` (a JSON schema of such params).
    """

    @property
    def name(self) -> str:
        """Registered name, e.g. ``"calc"``."""
        ...

    @property
    def description(self) -> str:
        """One line for ``ratchet envs``."""
        ...

    @property
    def version(self) -> str:
        """Bumped whenever tasks, tools or verification change meaning."""
        ...

    @property
    def max_difficulty(self) -> int:
        """Highest difficulty level."""
        ...

    def tasks(
        self, split: Split, n: int, seed: int = 0, difficulty: int | None = None
    ) -> list[Task]:
        """Draw ``n`` tasks of ``split``, each a different problem, deterministically."""
        ...

    def session(self, task: Task) -> Session:
        """Start a fresh, isolated episode for ``task``."""
        ...

    def oracle(self, task: Task) -> list[ToolCall]:
        """Return a sequence of tool calls that solves ``task`` (ending with ``finish``)."""
        ...


Describe = Callable[[Trajectory], TaskSpec | None]
"""``describe(trajectory) -> TaskSpec | None``: hindsight naming of what an episode did."""


def describer(env: Env) -> Describe | None:
    """Return the env's ``describe`` function, or ``None`` if it has none."""
    describe: Describe | None = getattr(env, "describe", None)
    return describe


FromParams = Callable[[dict[str, Any]], TaskSpec]
"""``task_from_params(params) -> TaskSpec``: the task some hidden params define."""


def task_builder(env: Env) -> FromParams | None:
    """Return the env's ``task_from_params`` function, or ``None`` if it has none."""
    build: FromParams | None = getattr(env, "task_from_params", None)
    return build


def params_schema_of(env: Env) -> dict[str, Any]:
    """Return the JSON schema of the env's task params (any JSON object if it declares none)."""
    schema: dict[str, Any] | None = getattr(env, "params_schema", None)
    return schema or {"type": "object"}


def problem_key_of(env: Env) -> ProblemKey:
    """Return the env's ``problem_key`` function, or the default canonical-params key."""
    key: ProblemKey = getattr(env, "problem_key", None) or canonical_key
    return key


class ToolSession:
    """A session over a list of tools plus a ``finish(answer)`` tool that ends the episode.

    Tool results become observation text; a :class:`ToolError`, bad arguments, an unknown
    tool or any exception inside a tool becomes an error observation the agent can react to.

    Args:
        task: The task being played.
        tools: The world's tools, already bound to the world.
        verify: Called with the submitted answer (``None`` if the agent never finished);
            must judge the world's state.
        policy: Rules the agent must follow, shown after the task text.
        close: Called once by :meth:`close` to release the world.
    """

    def __init__(
        self,
        task: Task,
        tools: Sequence[Tool],
        verify: Callable[[str | None], Verdict],
        policy: str = "",
        close: Callable[[], None] | None = None,
    ) -> None:
        self.task = task
        self.tools = {t.name: t for t in [*tools, Tool.from_function(_finish, FINISH)]}
        self.answer: str | None = None
        self.finished = False
        self._verify = verify
        self._policy = policy
        self._close = close

    def reset(self) -> Observation:
        """Return the task text (and policy) with the tool schemas."""
        text = self.task.instruction
        if self._policy:
            text = f"{text}\n\nPolicy:\n{self._policy}"
        return Observation(text=text, tools=tuple(t.schema() for t in self.tools.values()))

    def step(self, call: ToolCall) -> Observation:
        """Run one call; errors come back as observations, never as exceptions."""
        if self.finished:
            return error_observation("the episode is over: finish was already called", done=True)
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(self.tools)
            return error_observation(f"unknown tool {call.name!r}; available tools: {known}")
        try:
            arguments = tool.validate(call.arguments)
            if call.name == FINISH:
                self.answer = str(arguments["answer"])
                self.finished = True
                return Observation("Answer submitted.", done=True, terminated=True)
            result = tool.fn(**arguments)
        except ToolError as exc:
            return error_observation(str(exc))
        except Exception as exc:  # a broken tool must not end the run
            return error_observation(f"{call.name} failed: {type(exc).__name__}: {exc}")
        return Observation(format_result(result))

    def verify(self) -> Verdict:
        """Judge the world's final state given the submitted answer."""
        return self._verify(self.answer)

    def close(self) -> None:
        """Release the world (idempotent)."""
        if self._close is not None:
            self._close()
            self._close = None


def _finish(answer: str) -> str:
    """Submit your final answer and end the episode.

    Args:
        answer: The final answer (a value, or a short confirmation when the task is an action).
    """
    return answer


def format_result(result: Any) -> str:
    """Return a tool's return value as observation text (JSON for structured values)."""
    if isinstance(result, str):
        return result
    if isinstance(result, float) and result.is_integer():
        return str(int(result))
    return json.dumps(result, sort_keys=True, default=str)


World = TypeVar("World")


@dataclass(frozen=True)
class SimpleEnv(Generic[World]):
    """An env made from plain functions: the quickest way to write one.

    Its members use the protocol's vocabulary: ``verify``, ``oracle`` and ``describe`` here are
    the functions behind the session's ``verify()`` and the env's ``oracle()`` and
    ``describe()``.

    Attributes:
        name: Registered name.
        description: One line for ``ratchet envs``.
        sample: ``sample(rng, difficulty) -> TaskSpec``, a pure function of its inputs; drives
            :meth:`tasks`.
        build: Makes a fresh world for a task.
        tools: Returns the tool functions bound to a world.
        verify: ``verify(task, world, answer) -> Verdict``, reading the world's state.
        oracle: ``oracle(task) -> list[ToolCall]``, a solution ending with ``finish``.
        describe: ``describe(trajectory) -> TaskSpec | None``: names the task, in the same
            world, that the trajectory's actions would solve (hindsight); its params must let
            ``build`` recreate that world. ``None``: the env does no hindsight.
        policy: Rules shown to the agent with every task.
        max_difficulty: Highest difficulty level.
        version: Bumped whenever tasks, tools or verification change meaning.
        teardown: Releases a world when its session closes.
        problem_key: What makes two tasks the same problem (default: canonical params).
        task_from_params: ``task_from_params(params) -> TaskSpec``: the task some hidden params
            define, worded by the env; raises ``ValueError`` for params that define none.
            ``None``: tasks cannot be proposed for the env.
        params_schema: JSON schema of the params ``task_from_params`` takes.
    """

    name: str
    description: str
    sample: Sampler
    build: Callable[[Task], World]
    tools: Callable[[World], Sequence[Callable[..., Any]]]
    verify: Callable[[Task, World, str | None], Verdict]
    oracle: Callable[[Task], list[ToolCall]]
    describe: Describe | None = None
    policy: str = ""
    max_difficulty: int = 5
    version: str = "1"
    teardown: Callable[[World], None] | None = field(default=None)
    problem_key: ProblemKey = canonical_key
    task_from_params: FromParams | None = None
    params_schema: dict[str, Any] | None = None

    def tasks(
        self, split: Split, n: int, seed: int = 0, difficulty: int | None = None
    ) -> list[Task]:
        """Draw ``n`` tasks of ``split`` (see :func:`ratchet.core.task.generate_tasks`)."""
        return generate_tasks(
            self.name,
            self.sample,
            split=split,
            n=n,
            seed=seed,
            difficulty=difficulty,
            max_difficulty=self.max_difficulty,
            problem_key=self.problem_key,
        )

    def session(self, task: Task) -> ToolSession:
        """Build a fresh world for ``task`` and wrap it in a :class:`ToolSession`."""
        world = self.build(task)
        teardown = self.teardown
        return ToolSession(
            task,
            [Tool.from_function(fn) for fn in self.tools(world)],
            lambda answer: self.verify(task, world, answer),
            policy=self.policy,
            close=(lambda: teardown(world)) if teardown else None,
        )
