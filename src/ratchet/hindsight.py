"""Hindsight relabelling: turn what an exploratory episode achieved into a solved task.

An agent that has not yet solved anything still does things: it computes some value, cancels
some order, crafts some item. The env's ``describe`` names the task those actions solve and
checks it with its own verifier; replaying the actions on that task gives a verified success to
learn from before any real task is solved (Learn-by-interact, hindsight experience replay).

An episode that never submitted anything is also read as if it had stopped after one of its
last successful actions and reported that action's result with ``finish``: the agent saw the
result, so stopping there was open to it. Those variants are tried after the episode as it was.
"""

from __future__ import annotations

from dataclasses import replace

from ratchet.agent import Agent
from ratchet.env import FINISH, Env
from ratchet.harness import system_message
from ratchet.tool import ToolCall
from ratchet.trajectory import Trajectory, play


def relabel(
    env: Env, trajectory: Trajectory, agent: Agent, stopped_early: int = 3
) -> Trajectory | None:
    """Return ``trajectory``'s actions replayed as a verified success on the task they solve.

    The result carries the agent's system message, as if the agent had been given that task,
    and ``metadata["hindsight"]`` naming the task it came from. ``None`` if the env names no
    task or the replay does not pass.
    """
    if trajectory.passed or trajectory.error is not None:
        return None
    for calls in _variants(trajectory, stopped_early):
        candidate = trajectory if calls is None else play(env, trajectory.task, calls)
        try:
            task = env.describe(candidate)
        except Exception:  # a relabeller bug must not end the run; the episode stays a failure
            continue
        if task is None:
            continue
        actions = [step.call for step in candidate.steps if step.call is not None]
        replay = play(env, task, actions, agent=trajectory.agent)
        if replay.passed:
            return _as_agent(replay, trajectory, agent)
    return None


def _variants(trajectory: Trajectory, stopped_early: int) -> list[list[ToolCall] | None]:
    """The episode as it was (``None``), then up to ``stopped_early`` early-finished versions."""
    variants: list[list[ToolCall] | None] = [None]
    if trajectory.terminated:
        return variants
    for end in range(len(trajectory.steps) - 1, -1, -1):
        step = trajectory.steps[end]
        if step.call is None or step.failed or len(variants) > stopped_early:
            continue
        calls = [s.call for s in trajectory.steps[: end + 1] if s.call is not None]
        variants.append([*calls, ToolCall(FINISH, {"answer": step.observation.text})])
    return variants


def _as_agent(replay: Trajectory, source: Trajectory, agent: Agent) -> Trajectory:
    return replace(
        replay,
        messages=(system_message(agent), *replay.messages),
        model=source.model,
        sample=source.sample,
        metadata={"hindsight": True, "source_task": source.task.id},
    )
