"""Recording served conversations as trajectories, and attaching the verdicts clients report.

A chat client sends the whole conversation with every request, so a conversation is recognised
by its history: after each reply the server remembers a fingerprint of the messages so far plus
that reply, and a later request whose messages extend a remembered history continues that
conversation (one that goes back and branches starts a new one). A client may also name the
conversation (header ``X-Ratchet-Conversation`` or body field ``conversation_id``), which
survives server restarts. Every reply rewrites the conversation's trajectory in the store (one
per conversation, growing turn by turn), with no verdict until ``POST /v1/feedback`` reports one.

What a client sends is context, not the agent's doing: only the replies this server generated
are the agent's turns. Each recorded assistant turn carries whether a client wrote it
(:attr:`~ratchet.core.trajectory.Step.given`), known by the fingerprint of the history up to
and including it, so invented turns never become training targets or demonstrations; and a
generated turn carries its tokens when the backend records them
(:class:`~ratchet.core.trajectory.TokenTrace`). A conversation belongs to the API key that
started it: another key can neither continue it, rewrite it nor judge it. Its verdict is given
once: the same verdict again is answered as before, a different one is refused, and so is
continuing a judged conversation under its name.

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
from dataclasses import dataclass, field, replace
from typing import Any

import ratchet.engine.models.metadata as keys
from ratchet.core.agent import Agent
from ratchet.core.served import SERVED_ENV as SERVED_ENV  # its old home, kept importable
from ratchet.core.served import SERVED_FAMILY, SERVED_KEY
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation, Step, TokenTrace, Trajectory
from ratchet.core.verdict import Verdict
from ratchet.engine.models.base import Completion
from ratchet.engine.store import Store
from ratchet.serve.conversations import content_text, first_user_text

_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_REMEMBERED = 100_000


class UnknownConversation(LookupError):
    """No recorded conversation of this client has that id."""


class ConversationConflict(Exception):
    """The request would take over, rewrite or re-judge a conversation it may not."""


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


@dataclass(frozen=True)
class Turn:
    """One generated reply and the conversation it answers.

    Attributes:
        client_messages: The messages as the client sent them.
        conversation: The messages as the agent has them (its system message first).
        tools: The tools offered.
        reply: The assistant message returned.
        completion: The backend's reply (token counts, latency, token record).
        served_as: The model id the client asked for.
        backend: The backend's model reference (whose tokenizer any token ids are in).
        attached: What the client attached for the record (``metadata``, ``user``...).
    """

    client_messages: Sequence[dict[str, Any]]
    conversation: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]]
    reply: dict[str, Any]
    completion: Completion
    served_as: str
    backend: str
    attached: dict[str, Any] = field(default_factory=dict)


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
        self._known: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.RLock()

    def conversation_id(
        self, messages: Sequence[dict[str, Any]], named: str | None, owner: str = ""
    ) -> str:
        """The conversation ``messages`` continue: ``named``, a remembered one, or a new one.

        Args:
            messages: The messages as the client sent them.
            named: The id the client gave, if any.
            owner: Who asks (a fingerprint of the API key; ``""`` without keys).

        Raises:
            ValueError: If ``named`` is not a usable id.
            ConversationConflict: If ``named`` belongs to another key or is already judged.
        """
        if named is not None:
            check_conversation_id(named)
            with self._lock:
                found = self._find(named)
            if found is not None:
                _check_open(named, found[1], owner)
            return named
        prints = _fingerprints(messages)
        with self._lock:
            for index in range(len(messages) - 1, -1, -1):
                known = self._known.get((owner, prints[index]))
                if messages[index].get("role") != "assistant" or known is None:
                    continue
                found = self._find(known)
                if found is not None and _continues(found[1], prints, owner):
                    return known
                break  # it goes back to an earlier turn: a branch is a conversation of its own
        return f"conv-{secrets.token_hex(8)}"

    def record(self, conversation_id: str, turn: Turn, owner: str = "") -> Trajectory:
        """Store the conversation with its newest reply and remember its history.

        Raises:
            ConversationConflict: If, meanwhile, another key took the id or it was judged.
        """
        messages = (*turn.conversation, turn.reply)
        prints = _fingerprints([*turn.client_messages, turn.reply])
        assistant = [i for i, m in enumerate(turn.client_messages) if m.get("role") == "assistant"]
        with self._lock:
            found = self._find(conversation_id)
            earlier: dict[str, Step] = {}
            generated: set[str] = set()
            if found is not None:
                _check_open(conversation_id, found[1], owner)
                meta = found[1].metadata
                earlier = dict(zip(meta.get("turns", []), found[1].steps, strict=False))
                generated = set(meta.get("generated", []))
            turns = [prints[i] for i in assistant]
            given = [p not in generated and (owner, p) not in self._known for p in turns]
            steps = _steps(messages, [earlier.get(p) for p in turns], given, turn)
            generated |= {p for p, g in zip(turns, given, strict=True) if not g} | {prints[-1]}
            trajectory = self._trajectory(conversation_id, turn, messages, steps)
            trajectory.metadata.update(
                owner=owner,
                turns=[*turns, prints[-1]],
                generated=sorted(generated),
                history=prints[-1],
                history_length=len(prints),
            )
            self.store.put_trajectory(found[0] if found else self.run_id, trajectory)
            self._remember((owner, prints[-1]), conversation_id)
        return trajectory

    def feedback(
        self, conversation_id: str, score: float, passed: bool, note: str, owner: str = ""
    ) -> Trajectory:
        """Attach a verdict to a recorded conversation and return its trajectory.

        The same verdict again returns the trajectory unchanged.

        Raises:
            UnknownConversation: If no conversation of ``owner`` has that id in the store.
            ConversationConflict: If the conversation already has a different verdict.
            ValueError: If ``score`` is not in [0, 1] or the id is not usable.
        """
        verdict = Verdict(score, passed, note, {"feedback": 1.0})
        check_conversation_id(conversation_id)
        with self._lock:
            found = self._find(conversation_id)
            if found is None or found[1].metadata.get("owner", "") != owner:
                message = f"no conversation {conversation_id!r} has been recorded here"
                raise UnknownConversation(message)
            run_id, trajectory = found
            if trajectory.verdict == verdict:
                return trajectory
            if trajectory.verdict is not None:
                raise ConversationConflict(
                    f"conversation {conversation_id!r} already has a verdict "
                    f"(score {trajectory.verdict.score}); a verdict is given once"
                )
            updated = replace(trajectory, verdict=verdict, terminated=True)
            self.store.put_trajectory(run_id, updated)
        return updated

    def close(self) -> None:
        """Mark the server's run done."""
        self.store.finish_run(self.run_id, "done")

    def _find(self, conversation_id: str) -> tuple[str, Trajectory] | None:
        """The conversation's run and trajectory, newest run first."""
        task_id = f"served-{conversation_id}"
        for run in reversed(self.store.runs(kind="serve")):
            found = self.store.trajectories(run.id, task_ids={task_id})
            if found:
                return run.id, found[-1][1]
        return None

    def _remember(self, key: tuple[str, str], conversation_id: str) -> None:
        self._known[key] = conversation_id
        self._known.move_to_end(key)
        while len(self._known) > _REMEMBERED:
            self._known.popitem(last=False)

    def _trajectory(
        self,
        conversation_id: str,
        turn: Turn,
        messages: tuple[dict[str, Any], ...],
        steps: tuple[Step, ...],
    ) -> Trajectory:
        return Trajectory(
            task=Task(
                id=f"served-{conversation_id}",
                env=self.env,
                instruction=first_user_text(turn.conversation),
                split="train",
                problem=f"{SERVED_KEY}{conversation_id}",
                family=SERVED_FAMILY,
            ),
            agent=self.agent.version,
            env_version="served",
            messages=messages,
            tools=tuple(turn.tools),
            steps=steps,
            model=self.agent.model,
            seconds=sum(step.latency_s for step in steps),
            metadata={
                "conversation": conversation_id,
                "served_as": turn.served_as,
                **turn.attached,
            },
        )


def _check_open(conversation_id: str, trajectory: Trajectory, owner: str) -> None:
    """Refuse a request on a conversation of another key, or on a judged one."""
    if trajectory.metadata.get("owner", "") != owner:
        raise ConversationConflict(
            f"conversation id {conversation_id!r} is taken by another API key; name another"
        )
    if trajectory.verdict is not None:
        raise ConversationConflict(
            f"conversation {conversation_id!r} already has a verdict; continue it under a new id"
        )


def _continues(trajectory: Trajectory, prints: Sequence[str], owner: str) -> bool:
    """Whether messages with these fingerprints extend the recorded, unjudged conversation."""
    meta = trajectory.metadata
    length = int(meta.get("history_length", 0))
    return (
        trajectory.verdict is None
        and meta.get("owner", "") == owner
        and 0 < length <= len(prints)
        and prints[length - 1] == meta.get("history")
    )


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
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    name = function.get("name") if isinstance(function, dict) else None
    return [name, arguments]


def _steps(
    messages: Sequence[dict[str, Any]],
    earlier: Sequence[Step | None],
    given: Sequence[bool],
    turn: Turn,
) -> tuple[Step, ...]:
    """One step per assistant message; the newest carries the completion's text, counts and tokens.

    Args:
        messages: The conversation as the agent has it, the reply last.
        earlier: Per assistant message before the reply, its step as recorded before (for its
            counts and tokens), if any.
        given: Per assistant message before the reply, whether a client wrote it.
        turn: The reply's turn.
    """
    positions = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    steps = []
    for number, index in enumerate(positions):
        step = _step(messages, index, number)
        if number == len(positions) - 1:
            completion = turn.completion
            step = replace(
                step,
                output=completion.text,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                latency_s=completion.latency_s,
                tokens=_trace(completion, turn.backend),
            )
        elif given[number]:
            step = replace(step, given=True)
        elif (before := earlier[number]) is not None:
            step = replace(
                step,
                output=before.output,
                prompt_tokens=before.prompt_tokens,
                completion_tokens=before.completion_tokens,
                latency_s=before.latency_s,
                tokens=before.tokens,
            )
        steps.append(step)
    return tuple(steps)


def _step(messages: Sequence[dict[str, Any]], index: int, number: int) -> Step:
    """The step of the assistant message at ``index``: its call and the results after it."""
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
    output = content_text(message) or json.dumps([_call(raw) for raw in calls], ensure_ascii=False)
    return Step(call, Observation("\n".join(results)), output=output)


def _trace(completion: Completion, backend: str) -> TokenTrace | None:
    """The reply token for token, if the backend recorded its tokens."""
    meta = completion.metadata
    if keys.PROMPT_IDS not in meta or keys.COMPLETION_IDS not in meta:
        return None
    return TokenTrace(
        model=backend,
        prompt_ids=tuple(meta[keys.PROMPT_IDS]),
        completion_ids=tuple(meta[keys.COMPLETION_IDS]),
        logprobs=tuple(meta.get(keys.TOKEN_LOGPROBS, ())),
        grammar=meta.get(keys.GRAMMAR),
    )
