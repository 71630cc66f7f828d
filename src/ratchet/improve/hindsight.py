"""Hindsight relabelling: turn what a failed episode did achieve into solved tasks.

An agent that has not yet solved anything still does things: it computes some value, reaches
some room, reads some file. The env's ``describe`` names the task those actions solve in the
same world; replaying the actions on that task through the env's own verifier confirms it,
and the replay is a verified success to learn from before any real task is solved
(Learn-by-interact, hindsight experience replay).

Every prefix of the episode is described, not only the whole: a multi-step episode that went
wrong late still reached sub-states on the way (found the customer, reached the room), and
each is a smaller task it solved, taught by the shortest prefix that solves it. A prefix that
did not end with ``finish`` is read as if the agent had stopped there and reported what it had
just seen: the agent saw that result, so stopping was open to it.

The episode is read without its failed actions and without exact repeats of earlier ones, so
exploration's stumbles do not become lessons; the replay on the new task confirms the shortened
episode still solves it. A described task whose problem belongs to the probe or test split (as
:func:`~ratchet.core.env.split_of_params` says: by its problem key, or a fixed pool's or a
suite member's own split) is dropped and counted, never replayed: no decision or test may rest
on a trained-on problem.

A passed episode is trimmed the same way: the shortest of its views that still passes its own
task replaces it as a lesson, so a success that reached the goal and acted on teaches stopping.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ratchet.core.agent import Agent
from ratchet.core.env import FINISH, Env, describer, problem_key_of, split_of_params
from ratchet.core.task import make_task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation, Step, Trajectory, tool_steps
from ratchet.engine.harness import replay

MAX_PREFIXES = 12
REPLAY_SAMPLES = 1_000_000
"""Replays are numbered from here plus their source episode's sample. A replay can be on its
source's own task (the episode would have passed had it stopped earlier), and a store keeps
one episode per task, agent and sample: under the source's number the replay would be
dropped there, though kept in memory, and lost on resume."""

EpisodeKey = tuple[str, str, int]
"""``(agent, task id, sample)``: one stored episode."""


def episode_key(episode: Trajectory) -> EpisodeKey:
    """The key naming ``episode`` among a run's stored episodes."""
    return (episode.agent, episode.task.id, episode.sample)


def sources(experience: Sequence[Trajectory]) -> frozenset[EpisodeKey]:
    """The episodes of ``experience`` with a verified replay there at their own level or above.

    A replay at a lower level does not count: on calc, hindsight makes a level-1 lesson of
    almost every level-2 episode's first call, which says nothing of level 2.
    """
    levels = {t.task.id: t.task.difficulty for t in experience if not t.metadata.get("hindsight")}
    found: set[EpisodeKey] = set()
    for t in experience:
        source = str(t.metadata.get("source_task"))
        if not (t.passed and t.metadata.get("hindsight") and source in levels):
            continue
        if t.task.difficulty >= levels[source]:
            found.add((t.agent, source, t.sample - REPLAY_SAMPLES))
    return frozenset(found)


@dataclass(frozen=True)
class Relabelled:
    """What hindsight made of a batch of episodes.

    Attributes:
        successes: Verified replays: on the described tasks, one per distinct task, and the
            trimmed passed episodes (see :func:`trim`), one per episode.
        held_out: The ids of described tasks dropped because their problem is in the probe
            or test split, each once however many views or episodes described it.
        trimmed: How many of ``successes`` are trimmed passed episodes.
    """

    successes: tuple[Trajectory, ...] = ()
    held_out: frozenset[str] = frozenset()
    trimmed: int = 0


def relabel_all(
    env: Env, episodes: Sequence[Trajectory], agent: Agent, max_difficulty: int
) -> Relabelled:
    """Relabel every failed episode and trim every passed one.

    Relabels are kept up to ``max_difficulty``, one per task id.
    """
    found: dict[str, Trajectory] = {}
    trimmed: list[Trajectory] = []
    held_out: set[str] = set()
    for episode in episodes:
        if episode.passed:
            if (cut := trim(env, episode, agent)) is not None:
                trimmed.append(cut)
            continue
        result = relabel(env, episode, agent)
        held_out |= result.held_out
        for success in result.successes:
            if success.task.difficulty <= max_difficulty:
                found.setdefault(success.task.id, success)
    return Relabelled((*found.values(), *trimmed), frozenset(held_out), len(trimmed))


def trim(env: Env, trajectory: Trajectory, agent: Agent) -> Trajectory | None:
    """A passed episode cut to the shortest of its views that still passes its own task.

    A verifier that checks state passes an episode that reached the goal and went on acting
    (a grid agent that took the asked item, then every other item, and ran out of turns
    without ``finish``); learned as it is, the success teaches the acting on. The trimmed
    replay is stored like a relabel and supersedes its source as a lesson (see
    :func:`lessons`); an episode that never called ``finish`` gets one, as a relabel does.
    ``None`` when the episode is already its own shortest passing view.
    """
    if not trajectory.passed or trajectory.error is not None:
        return None
    for view in _views(trajectory):
        if view.calls == trajectory.calls:
            return None  # the episode itself is its shortest passing view
        replayed = replay(env, trajectory.task, view.calls, agent)
        if replayed.passed:
            return _replay_of(trajectory, replayed)
    return None


def lessons(experience: Sequence[Trajectory]) -> list[Trajectory]:
    """The verified successes to learn from, in order: a trimmed episode gives way to its trim."""
    trims = {
        (t.agent, t.task.id, t.sample - REPLAY_SAMPLES)
        for t in experience
        if t.passed and t.metadata.get("hindsight") and t.metadata.get("source_task") == t.task.id
    }
    return [
        t
        for t in experience
        if t.passed and (t.metadata.get("hindsight") or (t.agent, t.task.id, t.sample) not in trims)
    ]


def _replay_of(source: Trajectory, replayed: Trajectory) -> Trajectory:
    """``replayed`` marked as hindsight's, under its source's agent and model, numbered apart."""
    return replace(
        replayed,
        agent=source.agent,
        model=source.model,
        sample=REPLAY_SAMPLES + source.sample,
        metadata={"hindsight": True, "source_task": source.task.id},
    )


def relabel(env: Env, trajectory: Trajectory, agent: Agent) -> Relabelled:
    """Return ``trajectory``'s verified achievements as successes on the tasks they solve.

    Each success carries the agent's system message, as if the agent had been given that
    task, ``metadata["hindsight"]`` and ``metadata["source_task"]`` naming the task it came
    from, and its source's sample number plus :data:`REPLAY_SAMPLES`.
    """
    describe = describer(env)
    if describe is None or trajectory.passed or trajectory.error is not None:
        return Relabelled()
    found: dict[str, Trajectory] = {}
    held_out: set[str] = set()
    for view in _views(trajectory):
        try:
            spec = describe(view)
        except Exception:  # a describer bug must not end the run; the episode stays a failure
            continue
        if spec is None:
            continue
        task = make_task(
            env.name,
            spec,
            difficulty=trajectory.task.difficulty,
            seed=trajectory.task.seed,
            problem_key=problem_key_of(env),
            split=split_of_params(env, spec.params),
        )
        if task.split != "train":
            held_out.add(task.id)
            continue
        if task.id in found:
            continue
        replayed = replay(env, task, view.calls, agent)
        if replayed.passed:
            found[task.id] = _replay_of(trajectory, replayed)
    return Relabelled(tuple(found.values()), frozenset(held_out))


def _views(trajectory: Trajectory) -> list[Trajectory]:
    """The episode's useful steps if they end it, and its prefixes ending in ``finish``.

    The views are the whole and the longest :data:`MAX_PREFIXES` prefixes, returned shortest
    first: :func:`relabel` keeps the first view that solves each described task, and the
    shortest one solves it without the actions taken after it was done (a grid episode that
    took the asked item and then another teaches taking the asked one). An episode its budget
    cut off is read only through the prefixes: its useful steps alone can pass a verifier that
    checks state (a file moved), but a success that never calls ``finish`` would teach the
    agent to leave its episodes unfinished.
    """
    steps = _useful(trajectory)
    ended = bool(steps) and steps[-1].observation.done
    views = [replace(trajectory, steps=tuple(steps))] if ended else []
    for end in range(len(steps), 0, -1):
        if len(views) > MAX_PREFIXES:
            break
        last = steps[end - 1]
        if last.call is None or last.call.name == FINISH:
            continue
        finish = ToolCall(FINISH, {"answer": last.observation.text}, id=f"call_{end}")
        done = Observation("Answer submitted.", done=True, terminated=True)
        view_steps = (*steps[:end], Step(finish, done))
        views.append(replace(trajectory, steps=view_steps, terminated=True))
    # Stable: the whole episode stays ahead of the prefix as long as it (the same calls with
    # a finish of our making in place of the agent's).
    return sorted(views, key=lambda view: len(view.steps))


def _useful(trajectory: Trajectory) -> list[Step]:
    """The steps that did something: failed calls and exact repeats of earlier calls dropped.

    Skill calls are read as the env tool calls they made, so the replay needs no skill.
    """
    seen: set[str] = set()
    kept: list[Step] = []
    for step in tool_steps(trajectory.steps):
        if step.call is None or step.failed:
            continue
        key = json.dumps([step.call.name, step.call.arguments], sort_keys=True)
        if key not in seen:
            kept.append(step)
        seen.add(key)
    return kept
