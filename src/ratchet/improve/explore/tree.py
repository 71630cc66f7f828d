"""The search tree of one training task: the states its episodes reached, and where to branch.

Every episode of a task this round is a path from the task's start. A *node* is the state after
a prefix of actions (its key: the canonical actions of the prefix, :func:`.strategies.action_key`);
episodes that made the same actions pass through the same nodes, since the env is deterministic.
What was tried at a node is the set of actions its episodes took there.

Which node to branch from next (:func:`choose`) weighs, for each node on a clean prefix (no
failed call, no unparsed reply, no repeated action, no ``finish``) with room left for an action
and a ``finish``:

- novelty, as Go-Explore counts it: a state reached by few prefixes (``1 / sqrt(prefixes)``;
  states told apart by the env's fingerprint where it gives one, ``Session.fingerprint()``,
  else by what the agent was shown). Prefixes, not episodes: every episode below a node passes
  through it, and counting them made the search leave a node for the nodes past its next
  step, however wrong that step was;
- breadth: a node where few actions were tried (``1 / (1 + tried)``);
- a near miss: the best score an episode through the node earned (partial credit);
- a premature finish: a node within the agent's reach where the only action tried was
  ``finish`` counts double, since an agent that mastered the level below finishes where the
  plan needs one more step (past its reach, a finish shows no mastery of the prefix);
- reach: plans the agent has verified so far. A node deeper (in acting calls) than the longest
  verified success of the agent is halved per call beyond it, so search looks one step past
  what the agent can do before it looks further. The length comes from the agent's own verified
  experience, never from the task.

Ties go to the shallower node, then to the earlier episode. A branch that will ``finish`` at its
node (the ``close`` strategy) takes a node within one call of the agent's reach where fewest
answers were given, first one where an episode *stalled* (made the call that led there again
at once: an agent with nothing left to do repeats itself; on files the agent read the value
asked for and read it again three times), then the deepest: one where an episode went on
instead of finishing, or finished with an answer that failed. A node's ``finish`` is one
action for branching (a second answer is not another plan), but its answers are told apart for
closing, so a node where the agent read what was asked and then gave the wrong part of it gets
other parts of it tried.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ratchet.core.env import FINISH
from ratchet.core.trajectory import Step, Trajectory
from ratchet.engine.models.base import Completion
from ratchet.improve.explore.strategies import FINISH_KEY, acting, action_key, finish_answers


@dataclass(frozen=True)
class Node:
    """A state of one task's world, reached by a prefix of actions.

    Attributes:
        source: The first episode (in sample order) that passed through the node.
        turn: Turns of ``source`` that lead to it.
        tried: Canonical actions taken at it, in the order first taken.
        visits: Episodes that passed through it.
        acting: Acting calls in its prefix (calls to tools that take arguments).
        best: The best score of an episode through it.
        reached: Prefixes that reach its state: by the env's state fingerprint where it gives
            one (``Session.fingerprint()``), else by what the agent was shown.
        answers: The values of the ``finish`` arguments given at it, in the order first given.
        stalled: An episode's next action at it repeated the action that led to it.
    """

    source: Trajectory
    turn: int
    tried: tuple[str, ...]
    visits: int
    acting: int
    best: float
    reached: int = 1
    answers: tuple[str, ...] = ()
    stalled: bool = False

    def replies(self) -> tuple[Completion, ...]:
        """The source's replies up to the node, to replay (no tokens: nothing is generated)."""
        return tuple(_reply(step) for step in self.source.steps[: self.turn])

    def seen(self) -> tuple[str, ...]:
        """What the world answered to each of :meth:`replies`."""
        return tuple(step.observation.text for step in self.source.steps[: self.turn])


@dataclass(frozen=True)
class Weights:
    """How :func:`choose` weighs a node (see the module).

    Attributes:
        finish_bonus: Factor for a node within reach where only ``finish`` was tried.
        depth_decay: Factor per acting call beyond the agent's reach.
        max_tried: Actions tried at a node after which it is not branched again.
        max_answers: ``finish`` answers given at a node after which it is not closed again.
    """

    finish_bonus: float = 2.0
    depth_decay: float = 0.5
    max_tried: int = 4
    max_answers: int = 4


@dataclass
class _Tally:
    """What the episodes through one node showed, while :func:`nodes` walks them."""

    source: Trajectory
    turn: int
    acting: int
    state: object
    tried: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    visits: int = 0
    best: float = 0.0
    stalled: bool = False

    def node(self, reached: int) -> Node:
        return Node(
            self.source,
            self.turn,
            tuple(self.tried),
            self.visits,
            self.acting,
            self.best,
            reached,
            tuple(self.answers),
            self.stalled,
        )


def nodes(episodes: Sequence[Trajectory], max_turns: int) -> list[Node]:
    """The nodes of one task's tree that can still be branched, in discovery order.

    Args:
        episodes: The task's episodes this round, in sample order.
        max_turns: The episodes' turn budget: a node needs room for one action and ``finish``.
    """
    found: dict[tuple[str, ...], _Tally] = {}
    for episode in episodes:
        if episode.error is not None or not _replayable(episode):
            continue
        prefix: list[str] = []
        acted = 0
        for turn, step in enumerate(episode.steps[: max(0, max_turns - 1)]):
            state = _state(episode, turn)
            tally = found.setdefault(tuple(prefix), _Tally(episode, turn, acted, state))
            action = action_key(step)
            if action not in tally.tried:
                tally.tried.append(action)
            for answer in finish_answers(step.call) if step.call is not None else []:
                if answer not in tally.answers:
                    tally.answers.append(answer)
            tally.visits += 1
            tally.best = max(tally.best, episode.score)
            tally.stalled |= bool(prefix) and action == prefix[-1]
            if not _clean(step, prefix, action):
                break
            prefix.append(action)
            acted += acting(episode.tools, step.call.name) if step.call is not None else 0
    reached: dict[object, int] = {}
    for tally in found.values():
        reached[tally.state] = reached.get(tally.state, 0) + 1
    return [tally.node(reached[tally.state]) for tally in found.values()]


def choose(
    candidates: Sequence[Node], reach: int, weights: Weights, closing: bool = False
) -> Node | None:
    """The node to branch from next, or ``None`` when none can be (see the module).

    Args:
        candidates: The task's nodes (see :func:`nodes`).
        reach: Acting calls of the agent's longest verified success (at least 1).
        weights: How nodes are weighed.
        closing: The branch will ``finish`` at the node (the ``close`` strategy): only a node
            after at least one acting call, with fewer than ``max_answers`` answers given there,
            will do; within reach, fewest answers first, then a stalled one, then the deepest
            (where the agent went on instead of stopping, or stopped with the wrong part of what
            it read).
    """
    if closing:
        closable = [n for n in candidates if n.acting and len(n.answers) < weights.max_answers]
        within = [n for n in closable if n.acting <= reach + 1] or closable
        ranked = sorted(
            enumerate(within),
            key=lambda item: (len(item[1].answers), not item[1].stalled, -item[1].turn, item[0]),
        )
        return ranked[0][1] if ranked else None
    open_nodes = [n for n in candidates if len(n.tried) < weights.max_tried]
    if not open_nodes:
        return None

    def score(node: Node) -> float:
        depth = weights.depth_decay ** max(0, node.acting - reach)
        mastered = node.acting <= reach
        premature = weights.finish_bonus if mastered and node.tried == (FINISH_KEY,) else 1.0
        novelty = 1 / math.sqrt(node.reached)
        return depth * premature * (1 + node.best) * novelty / (1 + len(node.tried))

    ranked = sorted(
        enumerate(open_nodes), key=lambda item: (-score(item[1]), item[1].turn, item[0])
    )
    return ranked[0][1]


def reach_of(successes: Sequence[Trajectory]) -> int:
    """Acting calls of the longest of ``successes`` (verified episodes), at least 1."""
    longest = 1
    for episode in successes:
        if episode.passed:
            calls = [s.call for s in episode.steps if s.call is not None and not s.failed]
            longest = max(longest, sum(acting(episode.tools, c.name) for c in calls))
    return longest


def _state(episode: Trajectory, turn: int) -> object:
    """The state after ``episode``'s first ``turn`` steps: its fingerprint, else what was shown."""
    if turn == 0:
        return ()
    last = episode.steps[turn - 1].state
    if last is not None:
        return last
    return tuple(step.observation.text for step in episode.steps[:turn])


def _replayable(episode: Trajectory) -> bool:
    """Whether an episode can lend its prefix: its own replay matched its parent's world."""
    return episode.exploration is None or episode.exploration.replay_matched


def _clean(step: Step, prefix: Sequence[str], action: str) -> bool:
    """Whether the state after ``step`` is one worth branching from (see the module)."""
    if step.call is None or step.failed or step.call.name == FINISH or step.observation.done:
        return False
    return action not in prefix


def _reply(step: Step) -> Completion:
    calls = (step.call,) if step.call is not None else ()
    return Completion(step.output, tool_calls=calls)
