"""The episode loop: one function from task to verdict.

:func:`run_episode` plays one task: it opens a session, shows the model the conversation,
parses the action in each reply, runs it, and feeds back the result until the episode ends or
a budget runs out; then the verifier judges the world. Everything the model gets wrong
(unparseable output, unknown tools, bad arguments) becomes an observation it can react to.
Given the model's context window, each prompt is first cut to fit it by the declared context
policy (:mod:`ratchet.engine.context`); budgets count the episode's own work, not time spent
queued behind other episodes' model calls.
Where the replies come from is a :data:`Policy`: a model (batched across concurrent episodes
by the rollout scheduler) or a fixed list of calls (:func:`replay`, for oracles, null policies
and hindsight).
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.env import Env, Session
from ratchet.core.memory import Exemplar, Skill, demonstration
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import (
    INFRASTRUCTURE_ERROR,
    InfrastructureError,
    Observation,
    Step,
    Trajectory,
    assistant_message,
    error_observation,
    tool_message,
)
from ratchet.core.verdict import Verdict
from ratchet.engine.context import Context
from ratchet.engine.models.base import Completion, ModelError, Prompt
from ratchet.engine.skills import offer, play_call

CALL_FORMAT = '{"name": "<tool name>", "arguments": {<arguments>}}'
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)

Policy = Callable[[Prompt, int], Completion]
"""``policy(prompt, turn) -> Completion``: where an episode's replies come from."""


@dataclass(frozen=True)
class Budget:
    """Budgets for one episode.

    Attributes:
        max_turns: Model calls before an episode is truncated (unset: the agent's own).
        max_episode_tokens: Generated tokens, summed over turns, before truncation.
        timeout_s: Seconds of an episode's own generation and env steps (not time queued
            behind other episodes) before truncation.
    """

    max_turns: int | None = None
    max_episode_tokens: int = 2048
    timeout_s: float = 300.0


def run_episode(
    env: Env,
    task: Task,
    agent: Agent,
    policy: Policy,
    budget: Budget | None = None,
    *,
    demonstrations: Sequence[Exemplar] = (),
    skills: Sequence[Skill] = (),
    sample: int = 0,
    context: Context | None = None,
) -> Trajectory:
    """Play ``task`` with replies from ``policy`` and return the verified trajectory.

    Args:
        env: The env that made the task.
        task: The task to play.
        agent: The agent playing it (its system prompt, guidance, insights and version).
        policy: Where replies come from.
        budget: Turn, token and time budgets (default: :class:`Budget` with the agent's turns).
        demonstrations: Exemplars shown before the task, as earlier conversations.
        skills: Skills offered as extra tools (see :mod:`ratchet.engine.skills`).
        sample: Index of this sample among the k drawn for the task.
        context: The model's context window and the policy that keeps prompts inside it
            (``None``: prompts are sent whole).
    """
    budget = budget or Budget()
    if budget.max_turns is None:
        budget = replace(budget, max_turns=agent.max_turns)
    shown = [turn for exemplar in demonstrations for turn in demonstration(exemplar)]
    episode = _Episode(system_message(agent, task.env), shown, context, skills)
    try:
        session = env.session(task)
    except InfrastructureError as exc:
        return crashed(env, task, agent, sample, f"{INFRASTRUCTURE_ERROR}: {exc}")
    except Exception as exc:  # a broken env ends this episode, not the run
        return crashed(env, task, agent, sample, f"env failed to start: {exc!r}")
    try:
        episode.play(session, policy, budget)
    except ModelError:
        raise  # a backend that cannot work at all ends the rollout, not just this episode
    except InfrastructureError as exc:  # errored, not failed: left out of the rates
        episode.error = f"{INFRASTRUCTURE_ERROR}: {exc}"
    except Exception as exc:  # sessions and verifiers should not raise; if one does, stop here
        episode.error = f"episode failed: {type(exc).__name__}: {exc}"
    finally:
        session.close()
    return Trajectory(
        task=task,
        agent=agent.version,
        env_version=env.version,
        messages=(episode.system, *episode.messages),
        tools=episode.tools,
        steps=tuple(episode.steps),
        verdict=episode.verdict,
        model=agent.model,
        sample=sample,
        seconds=episode.worked_s,
        terminated=any(s.observation.terminated for s in episode.steps),
        truncated=episode.truncated,
        error=episode.error,
        metadata=episode.metadata(demonstrations),
    )


@dataclass
class _Episode:
    """The state of one episode while it is played (see :func:`run_episode`)."""

    system: dict[str, Any]
    demonstrations: list[dict[str, Any]]
    context: Context | None
    skills: Sequence[Skill] = ()
    tools: tuple[dict[str, Any], ...] = ()
    offered: dict[str, Skill] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    first: Observation = field(default_factory=lambda: Observation(""))
    verdict: Verdict | None = None
    truncated: bool = False
    error: str | None = None
    worked_s: float = 0.0
    trims: list[dict[str, int]] = field(default_factory=list)

    def play(self, session: Session, policy: Policy, budget: Budget) -> None:
        """Reset ``session``, then ask, act and observe until the episode ends; then verify."""
        tick = time.perf_counter()
        self.first = session.reset()
        self.tools, self.offered = offer(self.first.tools, self.skills)
        self.messages.append({"role": "user", "content": self.first.text})
        self.worked_s = time.perf_counter() - tick
        while not (self.steps and self.steps[-1].observation.done):
            prompt = None if _over_budget(self.steps, self.worked_s, budget) else self.prompt()
            if prompt is None:
                self.truncated = True
                break
            completion = policy(prompt, len(self.steps))
            if completion.error is not None:
                self.error = f"model error: {completion.error}"
                return
            step, replies = act(session, completion, len(self.steps), self.offered)
            self.steps.append(step)
            self.messages.extend(replies)
            self.worked_s += step.latency_s
        self.verdict = session.verify()

    def metadata(self, demonstrations: Sequence[Exemplar]) -> dict[str, Any]:
        """Provenance: the demonstrations shown and, if prompts were cut, how."""
        metadata: dict[str, Any] = {"exemplars": [ex.instruction for ex in demonstrations]}
        if self.trims and self.context is not None:
            metadata["context"] = {
                "window": self.context.window,
                "keep_turns": self.context.policy.keep_turns,
                "trims": self.trims,
            }
        return metadata

    def prompt(self) -> Prompt | None:
        """The prompt for the next turn, cut to the context window; ``None`` if it cannot fit."""
        if self.context is None:
            messages = (self.system, *self.demonstrations, *self.messages)
            return Prompt(messages, self.tools)
        fitted = self.context.fit(self.system, self.demonstrations, self.messages, self.tools)
        if fitted.trim:
            self.trims.append({"turn": len(self.steps), **fitted.trim})
        return fitted.prompt


def crashed(env: Env, task: Task, agent: Agent, sample: int, error: str) -> Trajectory:
    """Return the trajectory of an episode that crashed before its first step."""
    return Trajectory(
        task,
        agent.version,
        env.version,
        (system_message(agent, task.env),),
        model=agent.model,
        sample=sample,
        error=error,
    )


def act(
    session: Session,
    completion: Completion,
    turn: int,
    skills: Mapping[str, Skill] | None = None,
) -> tuple[Step, list[dict[str, Any]]]:
    """Parse the action in ``completion``, run it, and return the step and its chat messages.

    A call of one of ``skills`` runs the skill's steps through the session; the step records
    the skill call and, as its ``substeps``, the calls beneath it.
    """
    tick = time.perf_counter()
    substeps: tuple[Step, ...] = ()
    action = parse_action(completion)
    if isinstance(action, str):
        message = f"{action}. Reply with one tool call as JSON: {CALL_FORMAT}"
        observation = error_observation(message)
        replies = [
            {"role": "assistant", "content": completion.text},
            {"role": "user", "content": observation.text},
        ]
        call = None
    else:
        call = ToolCall(action.name, action.arguments, id=f"call_{turn}")
        observation, substeps = play_call(session, call, skills or {})
        replies = [assistant_message(call), tool_message(call, observation.text)]
    step = Step(
        call,
        observation,
        output=completion.text,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        latency_s=completion.latency_s + time.perf_counter() - tick,
        substeps=substeps,
        state=fingerprint_of(session),
    )
    return step, replies


def fingerprint_of(session: Session) -> str | None:
    """The session's fingerprint of its world's state, if it gives one (an optional member)."""
    fingerprint = getattr(session, "fingerprint", None)
    return None if fingerprint is None else str(fingerprint())


def _over_budget(steps: Sequence[Step], worked_s: float, budget: Budget) -> bool:
    generated = sum(s.completion_tokens for s in steps)
    return (
        len(steps) >= (budget.max_turns or 0)
        or generated >= budget.max_episode_tokens
        or worked_s >= budget.timeout_s
    )


def system_message(agent: Agent, env: str | None = None) -> dict[str, Any]:
    """Return the system message: the agent's prompt, its guidance for ``env``, its insights."""
    text = agent.system_prompt
    if env is not None and agent.guidance.get(env):
        text += "\n\n" + agent.guidance[env]
    if agent.insights:
        text += "\n\nRules learned from experience:\n" + "\n".join(
            f"- {i.rule}" for i in agent.insights
        )
    return {"role": "system", "content": text}


def parse_action(completion: Completion) -> ToolCall | str:
    """Return the tool call in a completion, or a message saying why there is none."""
    if completion.tool_calls:
        return completion.tool_calls[0]
    text = completion.text.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    start = text.find("{")
    if start < 0:
        return "the reply contains no JSON object"
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        return f"the reply is not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return 'the JSON object has no string "name"'
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return '"arguments" is a string that is not valid JSON'
    if not isinstance(arguments, dict):
        return '"arguments" must be a JSON object'
    return ToolCall(data["name"], arguments)


def scripted(calls: Sequence[ToolCall]) -> Policy:
    """Return a policy that makes ``calls`` in order (one per turn), for replays."""

    def policy(prompt: Prompt, turn: int) -> Completion:
        if turn >= len(calls):
            return Completion("", error="the scripted calls ran out")
        return Completion("", tool_calls=(calls[turn],))

    return policy


def replay(
    env: Env, task: Task, calls: Sequence[ToolCall], agent: Agent | None = None
) -> Trajectory:
    """Run a fixed sequence of tool calls on ``task`` in a fresh session; return the trajectory.

    Stops when the episode ends; calls left over are not made. Used for oracle and null
    policies, determinism checks and hindsight verification.
    """
    player = agent or Agent(version="scripted", model="scripted")
    budget = Budget(max_turns=len(calls), max_episode_tokens=sys.maxsize, timeout_s=math.inf)
    return run_episode(env, task, player, scripted(calls), budget)
