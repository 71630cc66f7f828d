"""The search tree of one training task: the states its episodes reached, and where to branch.

Every episode of a task this round is a path from the task's start. A *node* is the state after
a prefix of actions (its key: the canonical actions of the prefix, :func:`.strategies.action_key`);
episodes that made the same actions pass through the same nodes, since the env is deterministic.
What was tried at a node is the set of actions its episodes took there.

Which node to branch from next (:func:`choose`) weighs, for each node on a clean prefix (no
failed call, no unparsed reply, no repeated action, no ``finish``) with room left for an action
and a ``finish``:

- novelty, as Go-Explore counts it: a state few episodes reached (``1 / sqrt(visits)``);
- breadth: a node where few actions were tried (``1 / (1 + tried)``);
- a near miss: the best score an episode through the node earned (partial credit);
- a premature finish: a node where the only action tried was ``finish`` counts double, since an
  agent that mastered the level below finishes where the plan needs one more step;
- reach: plans the agent has verified so far. A node deeper (in acting calls) than the longest
  verified success of the agent is halved per call beyond it, so search looks one step past
  what the agent can do before it looks further. The length comes from the agent's own verified
  experience, never from the task.

Ties go to the shallower node, then to the earlier episode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ratchet.core.env import FINISH
from ratchet.core.trajectory import Step, Trajectory
from ratchet.engine.models.base import Completion
from ratchet.improve.explore.strategies import FINISH_KEY, acting, action_key


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
    """

    source: Trajectory
    turn: int
    tried: tuple[str, ...]
    visits: int
    acting: int
    best: float

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
        finish_bonus: Factor for a node where only ``finish`` was tried.
        depth_decay: Factor per acting call beyond the agent's reach.
        max_tried: Actions tried at a node after which it is not branched again.
    """

    finish_bonus: float = 2.0
    depth_decay: float = 0.5
    max_tried: int = 4


@dataclass
class _Tally:
    """What the episodes through one node showed, while :func:`nodes` walks them."""

    source: Trajectory
    turn: int
    acting: int
    tried: list[str] = field(default_factory=list)
    visits: int = 0
    best: float = 0.0

    def node(self) -> Node:
        return Node(self.source, self.turn, tuple(self.tried), self.visits, self.acting, self.best)


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
            tally = found.setdefault(tuple(prefix), _Tally(episode, turn, acted))
            action = action_key(step)
            if action not in tally.tried:
                tally.tried.append(action)
            tally.visits += 1
            tally.best = max(tally.best, episode.score)
            if not _clean(step, prefix, action):
                break
            prefix.append(action)
            acted += acting(episode.tools, step.call.name) if step.call is not None else 0
    return [tally.node() for tally in found.values()]


def choose(candidates: Sequence[Node], reach: int, weights: Weights) -> Node | None:
    """The node to branch from next, or ``None`` when none can be (see the module).

    Args:
        candidates: The task's nodes (see :func:`nodes`).
        reach: Acting calls of the agent's longest verified success (at least 1).
        weights: How nodes are weighed.
    """
    open_nodes = [n for n in candidates if len(n.tried) < weights.max_tried]
    if not open_nodes:
        return None

    def score(node: Node) -> float:
        depth = weights.depth_decay ** max(0, node.acting - reach)
        premature = weights.finish_bonus if node.tried == (FINISH_KEY,) else 1.0
        novelty = 1 / math.sqrt(node.visits)
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
