"""Hindsight relabelling: turn what an exploratory episode achieved into a solved task.

An agent that has not yet solved anything still does things: it computes some value, cancels
some order, crafts some item. The env's ``describe`` names the task those actions solve and
checks it with its own verifier; replaying the actions on that task gives a verified success to
learn from before any real task is solved (Learn-by-interact, hindsight experience replay).
"""

from __future__ import annotations

from dataclasses import replace

from ratchet.agent import Agent
from ratchet.env import Env
from ratchet.harness import system_message
from ratchet.trajectory import Trajectory, play


def relabel(env: Env, trajectory: Trajectory, agent: Agent) -> Trajectory | None:
    """Return ``trajectory``'s actions replayed as a verified success on the task they solve.

    The result carries the agent's system message, as if the agent had been given that task,
    and ``metadata["hindsight"]`` naming the task it came from. ``None`` if the env names no
    task or the replay does not pass.
    """
    if trajectory.passed or trajectory.error is not None:
        return None
    try:
        task = env.describe(trajectory)
    except Exception:  # a relabeller bug must not end the run; the episode stays a failure
        return None
    if task is None:
        return None
    calls = [step.call for step in trajectory.steps if step.call is not None]
    replay = play(env, task, calls, agent=trajectory.agent)
    if not replay.passed:
        return None
    return replace(
        replay,
        messages=(system_message(agent), *replay.messages),
        model=trajectory.model,
        sample=trajectory.sample,
        metadata={"hindsight": True, "source_task": trajectory.task.id},
    )
