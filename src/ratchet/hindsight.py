"""Hindsight relabelling: turn what an exploratory episode achieved into a solved task.

An agent that has not yet solved anything still does things: it computes some value, cancels
some order, crafts some item. The env's ``describe`` names the task those actions solve and
checks it with its own verifier; replaying the actions on that task gives a verified success to
learn from before any real task is solved (Learn-by-interact, hindsight experience replay).

An episode that never submitted anything is also read as if it had stopped after one of its
last successful actions and reported that action's result with ``finish``: the agent saw the
result, so stopping there was open to it. Those variants are tried after the episode as it was.

Relabelling reads the episode without the actions that failed and without exact repeats of
earlier actions, so exploration's stumbles do not become lessons; the replay on the new task
confirms the shortened episode still solves it. Nothing else is dropped here: a verifier that
reads only the final answer would accept an episode stripped of the very tool calls that
produced it, and that would teach guessing. Which actions belong to what was achieved is the
env's call, in ``describe``.
"""

from __future__ import annotations

import json
from dataclasses import replace

from ratchet.agent import Agent
from ratchet.env import FINISH, Env
from ratchet.harness import system_message
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
    for calls in _variants(env, trajectory, stopped_early):
        try:
            task = env.describe(play(env, trajectory.task, calls))
        except Exception:  # a relabeller bug must not end the run; the episode stays a failure
            continue
        if task is None or task.id in found:
            continue
        replay = play(env, task, calls, agent=trajectory.agent)
        if replay.passed:
            found[task.id] = replace(
                replay,
                messages=(system_message(agent), *replay.messages),
                model=trajectory.model,
                sample=trajectory.sample,
                metadata={"hindsight": True, "source_task": trajectory.task.id},
            )
    return list(found.values())


def _variants(env: Env, trajectory: Trajectory, stopped_early: int) -> list[list[ToolCall]]:
    """The episode's useful calls, then up to ``stopped_early`` early-finished prefixes."""
    calls = _useful(trajectory)
    variants = [calls]
    if trajectory.terminated:
        return variants
    for end in range(len(calls), 0, -1):
        if len(variants) > stopped_early:
            break
        prefix = calls[:end]
        if prefix[-1].name == FINISH:
            continue
        seen = play(env, trajectory.task, prefix).steps[-1].observation
        variants.append([*prefix, ToolCall(FINISH, {"answer": seen.text})])
    return variants


def _useful(trajectory: Trajectory) -> list[ToolCall]:
    """The calls that did something: failed calls and exact repeats of earlier calls dropped."""
    seen: set[str] = set()
    kept: list[ToolCall] = []
    for step in trajectory.steps:
        if step.call is None or step.failed:
            continue
        key = json.dumps([step.call.name, step.call.arguments], sort_keys=True)
        if key not in seen:
            kept.append(step.call)
        seen.add(key)
    return kept
