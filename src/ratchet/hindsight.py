"""Hindsight relabelling: turn what an exploratory episode achieved into a solved task.

An agent that has not yet solved anything still does things: it computes some value, cancels
some order, crafts some item. The env's ``describe`` names the task those actions solve and
checks it with its own verifier; replaying the actions on that task gives a verified success to
learn from before any real task is solved (Learn-by-interact, hindsight experience replay).

An episode that never submitted anything is also read as if it had stopped after one of its
last successful actions and reported that action's result with ``finish``: the agent saw the
result, so stopping there was open to it. Those variants are tried after the episode as it was.

The relabelled episode drops the actions that failed and the exact repeats of earlier actions
(when the replay still passes without them), so exploration's stumbles do not become lessons.
Nothing else is dropped: a verifier that reads only the final answer would accept an episode
stripped of the very tool calls that produced it, and that would teach guessing.
"""

from __future__ import annotations

import json
from dataclasses import replace

from ratchet.agent import Agent
from ratchet.env import FINISH, Env
from ratchet.harness import system_message
from ratchet.task import Task
from ratchet.tool import ToolCall
from ratchet.trajectory import Trajectory, play


def relabel(
    env: Env, trajectory: Trajectory, agent: Agent, stopped_early: int = 3
) -> list[Trajectory]:
    """Return ``trajectory``'s actions replayed as verified successes on the tasks they solve.

    One success per distinct task: the episode as it was and each early-finished variant may
    name a different one (a chain of three operations also contains a chain of one). Each
    carries the agent's system message, as if the agent had been given that task, and
    ``metadata["hindsight"]`` naming the task it came from.
    """
    if trajectory.passed or trajectory.error is not None:
        return []
    found: dict[str, Trajectory] = {}
    for calls in _variants(trajectory, stopped_early):
        candidate = trajectory if calls is None else play(env, trajectory.task, calls)
        try:
            task = env.describe(candidate)
        except Exception:  # a relabeller bug must not end the run; the episode stays a failure
            continue
        if task is None or task.id in found:
            continue
        replay = play(env, task, _essential(env, task, candidate), agent=trajectory.agent)
        if replay.passed:
            found[task.id] = replace(
                replay,
                messages=(system_message(agent), *replay.messages),
                model=trajectory.model,
                sample=trajectory.sample,
                metadata={"hindsight": True, "source_task": trajectory.task.id},
            )
    return list(found.values())


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


def _essential(env: Env, task: Task, trajectory: Trajectory) -> list[ToolCall]:
    """The trajectory's calls without failed ones and exact repeats, if that still passes."""
    everything = [step.call for step in trajectory.steps if step.call is not None]
    seen: set[str] = set()
    kept: list[ToolCall] = []
    for step in trajectory.steps:
        if step.call is None or step.failed:
            continue
        key = json.dumps([step.call.name, step.call.arguments], sort_keys=True)
        if key not in seen:
            kept.append(step.call)
        seen.add(key)
    return kept if play(env, task, kept).passed else everything
