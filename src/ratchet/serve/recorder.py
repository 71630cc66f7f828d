"""Recording served conversations as trajectories, and attaching the verdicts clients report.

A chat client sends the whole conversation with every request, so a conversation is recognised
by its history: after each reply the server remembers a fingerprint of the messages so far plus
that reply, and a later request whose messages start with a remembered history continues that
conversation. A client may also name the conversation (header ``X-Ratchet-Conversation`` or
body field ``conversation_id``), which survives server restarts. Every reply rewrites the
conversation's trajectory in the store (one per conversation, growing turn by turn), with no
verdict: it is unverified until ``POST /v1/feedback`` reports one.

A recorded conversation has no problem key in any env's splits, so it is recorded as a train
task of family ``served`` with the problem key ``served:<conversation id>``: it can become
training experience (``ratchet improve --experience``) but never a probe or test task.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation, Step, Trajectory
from ratchet.core.verdict import Verdict
from ratchet.engine.models.base import Completion
from ratchet.engine.store import Store
from ratchet.serve.memory import SERVED_FAMILY, SERVED_KEY, content_text, first_user_text

SERVED_ENV = "served"
"""The env recorded for conversations when the server knows of none."""

_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_REMEMBERED = 100_000


class UnknownConversation(LookupError):
    """No recorded conversation has that id."""


def check_conversation_id(value: str) -> str:
    """Return ``value`` if it is a usable conversation id.

    Raises:
        ValueError: If it is empty, too long or has characters other than letters, digits
            and ``_.:-``.
    """
    if not _CONVERSATION_ID.match(value):
        raise ValueError(
            f"conversation id {value[:40]!r} must be 1-128 letters, digits or _.:- characters"
        )
    return value


class Recorder:
    """Records one server's conversations in a store (as one ``serve`` run).

    Args:
        store: Where conversations are recorded.
        agent: The served agent (its version and model go on every trajectory).
        env: The env recorded on conversations (default :data:`SERVED_ENV`).
        settings: The server's settings, kept with the run.
    """

    def __init__(
        self, store: Store, agent: Agent, env: str | None, settings: dict[str, Any]
    ) -> None:
        self.store = store
        self.agent = agent
        self.env = env or SERVED_ENV
        self.run_id = store.start_run("serve", settings)
        self._known: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def conversation_id(self, messages: Sequence[dict[str, Any]], named: str | None) -> str:
        """The conversation ``messages`` continue: ``named``, a remembered one, or a new one."""
        if named is not None:
            return check_conversation_id(named)
        prints = _fingerprints(messages)
        with self._lock:
            for index in range(len(messages) - 1, -1, -1):
                if messages[index].get("role") == "assistant" and prints[index] in self._known:
                    return self._known[prints[index]]
        return f"conv-{secrets.token_hex(8)}"

    def record(
        self,
        conversation_id: str,
        client_messages: Sequence[dict[str, Any]],
        conversation: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        reply: dict[str, Any],
        completion: Completion,
        served_as: str,
    ) -> Trajectory:
        """Store the conversation with its newest reply and remember its history.

        Args:
            conversation_id: From :meth:`conversation_id`.
            client_messages: The messages as the client sent them (for recognising the
                conversation next time).
            conversation: The messages as the agent has them (its system message first).
            tools: The tools offered.
            reply: The assistant message returned.
            completion: The backend's reply (token counts, latency).
            served_as: The model id the client asked for.
        """
        messages = (*conversation, reply)
        task_id = f"served-{conversation_id}"
        earlier = self._stored(task_id)
        steps = _steps(messages, earlier.steps if earlier else (), completion)
        trajectory = Trajectory(
            task=Task(
                id=task_id,
                env=self.env,
                instruction=first_user_text(conversation),
                split="train",
                problem=f"{SERVED_KEY}{conversation_id}",
                family=SERVED_FAMILY,
            ),
            agent=self.agent.version,
            env_version="served",
            messages=messages,
            tools=tuple(tools),
            steps=steps,
            model=self.agent.model,
            seconds=sum(step.latency_s for step in steps),
            metadata={"conversation": conversation_id, "served_as": served_as},
        )
        self.store.put_trajectory(self.run_id, trajectory)
        key = _fingerprints([*client_messages, reply])[-1]
        with self._lock:
            self._known[key] = conversation_id
            self._known.move_to_end(key)
            while len(self._known) > _REMEMBERED:
                self._known.popitem(last=False)
        return trajectory

    def feedback(self, conversation_id: str, score: float, passed: bool, note: str) -> Trajectory:
        """Attach a verdict to a recorded conversation and return its trajectory.

        Raises:
            UnknownConversation: If no conversation with that id is recorded in the store.
            ValueError: If ``score`` is not in [0, 1].
        """
        verdict = Verdict(score, passed, note, {"feedback": 1.0})
        task_id = f"served-{check_conversation_id(conversation_id)}"
        for run in reversed(self.store.runs(kind="serve")):
            found = self.store.trajectories(run.id, task_ids={task_id})
            if found:
                updated = replace(found[-1][1], verdict=verdict, terminated=True)
                self.store.put_trajectory(run.id, updated)
                return updated
        raise UnknownConversation(f"no conversation {conversation_id!r} has been recorded here")

    def close(self) -> None:
        """Mark the server's run done."""
        self.store.finish_run(self.run_id, "done")

    def _stored(self, task_id: str) -> Trajectory | None:
        found = self.store.trajectories(self.run_id, task_ids={task_id})
        return found[-1][1] if found else None


def _fingerprints(messages: Sequence[dict[str, Any]]) -> list[str]:
    """One fingerprint per prefix of ``messages``, blind to call ids and JSON layout."""
    prints, running = [], hashlib.sha256()
    for message in messages:
        calls = [_call(raw) for raw in message.get("tool_calls") or []]
        shown = [message.get("role"), content_text(message).strip(), calls]
        running.update(json.dumps(shown, sort_keys=True, default=str).encode())
        prints.append(running.copy().hexdigest())
    return prints


def _call(raw: Any) -> list[Any]:
    function = raw.get("function", {}) if isinstance(raw, dict) else {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    return [function.get("name"), arguments]


def _steps(
    messages: Sequence[dict[str, Any]], earlier: Sequence[Step], completion: Completion
) -> tuple[Step, ...]:
    """One step per assistant message; the newest carries the completion's counts."""
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    steps = []
    for number, index in enumerate(turns):
        message = messages[index]
        calls = message.get("tool_calls") or []
        call = None
        if calls:
            name, arguments = _call(calls[0])
            if isinstance(name, str) and isinstance(arguments, dict):
                call = ToolCall(name, arguments, str(calls[0].get("id") or f"call_{number}"))
        results = []
        for later in messages[index + 1 :]:
            if later.get("role") != "tool":
                break
            results.append(content_text(later))
        output = content_text(message) or json.dumps(
            [_call(raw) for raw in calls], ensure_ascii=False
        )
        step = Step(call, Observation("\n".join(results)), output=output)
        if number == len(turns) - 1:
            step = replace(
                step,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                latency_s=completion.latency_s,
            )
        elif number < len(earlier):
            before = earlier[number]
            step = replace(
                step,
                prompt_tokens=before.prompt_tokens,
                completion_tokens=before.completion_tokens,
                latency_s=before.latency_s,
            )
        steps.append(step)
    return tuple(steps)
