"""Envs and sessions: the protocols every environment implements, and helpers to write one.

An env is a family of worlds. ``env.tasks(...)`` draws tasks; ``env.session(task)`` starts an
isolated episode whose ``verify()`` reads the world's own state after the episode, never the
agent's claims. Most envs are a handful of typed tool functions over a world object, which
:class:`SimpleEnv` turns into a full env (see ``docs/envs.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from ratchet.task import Sampler, Split, Task, TaskSpec, content_key, generate_tasks
from ratchet.tool import Tool, ToolCall, ToolError
from ratchet.verdict import Verdict

if TYPE_CHECKING:
    from ratchet.trajectory import Trajectory

FINISH = "finish"


@dataclass(frozen=True)
class Observation:
    """What the agent sees after ``reset()`` or a ``step()``.

    Attributes:
        text: The observation text (task text on reset, a tool result after a step).
        tools: The OpenAI-format schemas of the tools on offer (set on reset).
        done: Whether the episode is over (``terminated or truncated``).
        reward: Reward for this step; sessions give 0 until verification.
        terminated: The task is over because the agent finished it.
        truncated: The episode was cut off by a budget (turns, tokens, time).
        error: Set when the action failed (unknown tool, bad arguments, tool error).
    """

    text: str
    tools: tuple[dict[str, Any], ...] = ()
    done: bool = False
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (tool schemas omitted: they live on the trajectory)."""
        return {
            "text": self.text,
            "done": self.done,
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Observation:
        """Build an observation from :meth:`to_dict` output."""
        return cls(
            text=data["text"],
            done=data["done"],
            reward=data["reward"],
            terminated=data["terminated"],
            truncated=data["truncated"],
            error=data["error"],
        )


@runtime_checkable
class Session(Protocol):
    """One isolated episode in an env's world."""

    def reset(self) -> Observation:
        """Start the episode; the observation carries the task text and the tool schemas."""
        ...

    def step(self, call: ToolCall) -> Observation:
        """Run one tool call and return what it produced."""
        ...

    def verify(self) -> Verdict:
        """Judge the world's final state."""
        ...

    def close(self) -> None:
        """Release the world's resources."""
        ...


@runtime_checkable
class Env(Protocol):
    """A family of worlds with a task generator, an oracle and a state-reading verifier."""

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
        """Draw ``n`` distinct tasks of ``split``, deterministically from ``seed``."""
        ...

    def session(self, task: Task) -> Session:
        """Start a fresh, isolated episode for ``task``."""
        ...

    def oracle(self, task: Task) -> list[ToolCall]:
        """Return a sequence of tool calls that solves ``task`` (ending with ``finish``)."""
        ...

    def describe(self, trajectory: Trajectory) -> Task | None:
        """Hindsight relabelling: the task that what ``trajectory`` actually did would solve.

        Returns a ``train`` task that the env's own verifier passes when the trajectory's
        actions are replayed on it, or ``None`` when the trajectory achieved nothing nameable.
        """
        ...


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
            return _error("the episode is over: finish was already called", done=True)
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(self.tools)
            return _error(f"unknown tool {call.name!r}; available tools: {known}")
        try:
            arguments = tool.validate(call.arguments)
            if call.name == FINISH:
                self.answer = str(arguments["answer"])
                self.finished = True
                return Observation("Answer submitted.", done=True, terminated=True)
            result = tool.fn(**arguments)
        except ToolError as exc:
            return _error(str(exc))
        except Exception as exc:  # a broken tool must not end the run
            return _error(f"{call.name} failed: {type(exc).__name__}: {exc}")
        return Observation(render(result))

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


def _error(message: str, done: bool = False) -> Observation:
    return Observation(f"Error: {message}", done=done, error=message)


def render(result: Any) -> str:
    """Render a tool's return value as observation text (JSON for structured values)."""
    if isinstance(result, str):
        return result
    if isinstance(result, float) and result.is_integer():
        return str(int(result))
    return json.dumps(result, sort_keys=True, default=str)


World = TypeVar("World")


@dataclass(frozen=True)
class SimpleEnv(Generic[World]):
    """An env made from plain functions: the quickest way to write one.

    Attributes:
        name: Registered name.
        description: One line for ``ratchet envs``.
        sample: ``sample(rng, difficulty) -> TaskSpec``, a pure function of its inputs.
        build: Makes a fresh world for a task.
        tools: Returns the tool functions bound to a world.
        check: ``check(task, world, answer) -> Verdict``, reading the world's state.
        solve: ``solve(task) -> list[ToolCall]``, the oracle's plan ending with ``finish``.
        policy: Rules shown to the agent with every task.
        max_difficulty: Highest difficulty level.
        version: Bumped whenever tasks, tools or verification change meaning.
        teardown: Releases a world when its session closes.
        relabel: ``relabel(trajectory) -> TaskSpec | None``: names what a trajectory achieved,
            for hindsight relabelling; the params must let ``build`` recreate the same world.
    """

    name: str
    description: str
    sample: Sampler
    build: Callable[[Task], World]
    tools: Callable[[World], Sequence[Callable[..., Any]]]
    check: Callable[[Task, World, str | None], Verdict]
    solve: Callable[[Task], list[ToolCall]]
    policy: str = ""
    max_difficulty: int = 5
    version: str = "1"
    teardown: Callable[[World], None] | None = field(default=None)
    relabel: Callable[[Trajectory], TaskSpec | None] | None = field(default=None)

    def tasks(
        self, split: Split, n: int, seed: int = 0, difficulty: int | None = None
    ) -> list[Task]:
        """Draw ``n`` distinct tasks of ``split`` (see :func:`ratchet.task.generate_tasks`)."""
        return generate_tasks(
            self.name,
            self.sample,
            split=split,
            n=n,
            seed=seed,
            difficulty=difficulty,
            max_difficulty=self.max_difficulty,
        )

    def session(self, task: Task) -> ToolSession:
        """Build a fresh world for ``task`` and wrap it in a :class:`ToolSession`."""
        world = self.build(task)
        teardown = self.teardown
        return ToolSession(
            task,
            [Tool.from_function(fn) for fn in self.tools(world)],
            lambda answer: self.check(task, world, answer),
            policy=self.policy,
            close=(lambda: teardown(world)) if teardown else None,
        )

    def oracle(self, task: Task) -> list[ToolCall]:
        """Return the oracle's plan for ``task``."""
        return self.solve(task)

    def describe(self, trajectory: Trajectory) -> Task | None:
        """Relabel ``trajectory`` with the task it solved, verified by replaying its actions.

        Returns ``None`` if the env has no ``relabel`` function, if it names nothing, or if the
        replayed actions do not pass the verifier on the relabelled task.
        """
        from ratchet.trajectory import play

        spec = self.relabel(trajectory) if self.relabel else None
        if spec is None:
            return None
        key = content_key(spec.instruction, spec.params)
        task = Task(
            id=f"{self.name}-h{key[:12]}",
            env=self.name,
            instruction=spec.instruction,
            split="train",
            family=spec.family,
            difficulty=spec.difficulty or trajectory.task.difficulty,
            seed=trajectory.task.seed,
            params=spec.params,
        )
        calls = [step.call for step in trajectory.steps if step.call is not None]
        return task if play(self, task, calls).passed else None
