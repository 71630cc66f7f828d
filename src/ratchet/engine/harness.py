"""The episode loop: one function from task to verdict.

:func:`run_episode` plays one task: it opens a session, shows the model the conversation,
parses the action in each reply, runs it, and feeds back the result until the episode ends or
a budget runs out; then the verifier judges the world. Everything the model gets wrong
(unparseable output, unknown tools, bad arguments) becomes an observation it can react to.
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
from dataclasses import dataclass, replace
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.env import Env, Session
from ratchet.core.memory import Exemplar, Skill, demonstration
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import (
    Observation,
    Step,
    Trajectory,
    assistant_message,
    error_observation,
    tool_message,
)
from ratchet.core.verdict import Verdict
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
        max_turns: Model calls before the episode is truncated (``None``: the agent's own).
        max_episode_tokens: Generated tokens, summed over turns, before truncation.
        timeout_s: Seconds of work (the model's own generation time and the env's steps)
            before truncation; time spent queued behind other episodes' model calls does not
            count, so a loaded machine slows episodes down instead of cutting them short.
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
    """
    budget = budget or Budget()
    if budget.max_turns is None:
        budget = replace(budget, max_turns=agent.max_turns)
    messages: list[dict[str, Any]] = [system_message(agent, task.env)]
    context = [turn for exemplar in demonstrations for turn in demonstration(exemplar)]
    steps: list[Step] = []
    first, truncated = Observation(""), False
    tools: tuple[dict[str, Any], ...] = ()
    offered: dict[str, Skill] = {}
    verdict: Verdict | None = None
    error: str | None = None
    tick, worked_s = time.perf_counter(), 0.0
    try:
        session = env.session(task)
    except Exception as exc:  # a broken env ends this episode, not the run
        return crashed(env, task, agent, sample, f"env failed to start: {exc!r}")
    try:
        first = session.reset()
        tools, offered = offer(first.tools, skills)
        messages.append({"role": "user", "content": first.text})
        worked_s = time.perf_counter() - tick
        while not (steps and steps[-1].observation.done):
            if _over_budget(steps, worked_s, budget):
                truncated = True
                break
            completion = policy(Prompt((messages[0], *context, *messages[1:]), tools), len(steps))
            if completion.error is not None:
                error = f"model error: {completion.error}"
                break
            step, replies = act(session, completion, len(steps), offered)
            steps.append(step)
            messages.extend(replies)
            worked_s += step.latency_s
        if error is None:
            verdict = session.verify()
    except ModelError:
        raise  # a backend that cannot work at all ends the rollout, not just this episode
    except Exception as exc:  # sessions and verifiers should not raise; if one does, stop here
        error = f"episode failed: {type(exc).__name__}: {exc}"
    finally:
        session.close()
    return Trajectory(
        task=task,
        agent=agent.version,
        env_version=env.version,
        messages=tuple(messages),
        tools=tools,
        steps=tuple(steps),
        verdict=verdict,
        model=agent.model,
        sample=sample,
        seconds=worked_s,
        terminated=any(s.observation.terminated for s in steps),
        truncated=truncated,
        error=error,
        metadata={"exemplars": [ex.instruction for ex in demonstrations]},
    )


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
    )
    return step, replies


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
