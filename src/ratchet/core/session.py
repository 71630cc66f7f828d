"""Sessions: one isolated episode in an env's world, and the session most envs use.

A :class:`Session` is what ``env.session(task)`` returns: ``reset()`` shows the task and the
tool schemas, ``step(call)`` runs one tool call, ``verify()`` judges the world's final state
and ``close()`` releases it. :class:`ToolSession` is that session over a list of typed tools
plus the ``finish(answer)`` tool every episode ends with; :class:`ratchet.core.env.SimpleEnv`
builds one per task.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ratchet.core.task import Task
from ratchet.core.tool import Tool, ToolCall, ToolError
from ratchet.core.trajectory import Observation, error_observation
from ratchet.core.verdict import Verdict

FINISH = "finish"
"""The tool that submits the final answer and ends an episode."""


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


def end_episode(text: str) -> Observation:
    """Return what a tool returns to end the episode: a game won or lost, a door that closed.

    The session stops taking calls and the verifier judges the world as it is (with no
    submitted answer).
    """
    return Observation(text, done=True, terminated=True)


class ToolSession:
    """A session over a list of tools plus a ``finish(answer)`` tool that ends the episode.

    With a ``state`` function it has the optional ``fingerprint()`` member: a text that is the
    same exactly when two worlds are in the same state (exploration counts visits to states by
    it; without it, by what the agent was shown).

    Tool results become observation text; a tool that returns an :class:`Observation` with
    ``done`` set (see :func:`end_episode`) ends the episode. A :class:`ToolError`, bad
    arguments, an unknown tool or any exception inside a tool becomes an error observation the
    agent can react to.

    Args:
        task: The task being played.
        tools: The world's tools, already bound to the world.
        verify: Called with the submitted answer (``None`` if the agent never finished);
            must judge the world's state.
        policy: Rules the agent must follow, shown after the task text.
        close: Called once by :meth:`close` to release the world.
        intro: The world's first observation (a game's opening room), shown after the task.
        state: Returns the world's state fingerprint (see above); ``None``: none.
    """

    def __init__(
        self,
        task: Task,
        tools: Sequence[Tool],
        verify: Callable[[str | None], Verdict],
        policy: str = "",
        close: Callable[[], None] | None = None,
        intro: str = "",
        state: Callable[[], str] | None = None,
    ) -> None:
        self.task = task
        self.tools = {t.name: t for t in [*tools, Tool.from_function(_finish, FINISH)]}
        self.answer: str | None = None
        self.finished = False
        self._verify = verify
        self._policy = policy
        self._close = close
        self._intro = intro
        if state is not None:
            self.fingerprint = state

    def reset(self) -> Observation:
        """Return the task text (the world's first observation, the policy) and tool schemas."""
        text = self.task.instruction
        if self._intro:
            text = f"{text}\n\n{self._intro}"
        if self._policy:
            text = f"{text}\n\nPolicy:\n{self._policy}"
        return Observation(text=text, tools=tuple(t.schema() for t in self.tools.values()))

    def step(self, call: ToolCall) -> Observation:
        """Run one call; errors come back as observations, never as exceptions."""
        if self.finished:
            return error_observation("the episode is over; no more calls are taken", done=True)
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
        if isinstance(result, Observation):
            self.finished = result.done
            return result
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
