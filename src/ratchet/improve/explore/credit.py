"""Step-level credit from a task's tree: each action scored against the others taken at its state.

A task's episodes (its samples and the search's branches) share prefixes: a branch replays its
parent's actions up to the node it branched from. Every prefix is a state, and its value is the
mean score of the episodes that passed through it. An action's advantage is the value of the
state it led to minus the value of the state it was taken at, divided by the spread of the
scores there (GiGPO's anchor states, Tree-GRPO's per-node groups): an action where every sibling
did as well gets none, and the turn at which a success and a failure parted gets it all.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Sequence

from ratchet.core.trajectory import Step, Trajectory


def turn_advantages(group: Sequence[Trajectory]) -> list[tuple[float, ...] | None]:
    """Each episode's advantage per assistant turn, from the tree ``group`` forms.

    ``None`` for an episode none of whose actions was taken at a state where outcomes differed.

    Args:
        group: The episodes of one task (one agent's: the values are its own).
    """
    scores: dict[tuple[str, ...], list[float]] = {}
    paths = []
    for episode in group:
        actions = [_exact(step) for step in episode.steps]
        path = [tuple(actions[:turn]) for turn in range(len(actions) + 1)]
        paths.append(path)
        for prefix in path:
            scores.setdefault(prefix, []).append(episode.score)
    found: list[tuple[float, ...] | None] = []
    for path in paths:
        advantages = []
        for here, there in itertools.pairwise(path):
            spread = statistics.pstdev(scores[here])
            gain = statistics.fmean(scores[there]) - statistics.fmean(scores[here])
            advantages.append(gain / spread if spread else 0.0)
        found.append(tuple(advantages) if any(advantages) else None)
    return found


def _exact(step: Step) -> str:
    """A step's action with everything it said.

    A ``finish``'s answer too: credit tells two answers apart, where branching counts every
    ``finish`` as one action.
    """
    if step.call is None:
        return json.dumps(["", step.output])
    return json.dumps([step.call.name, step.call.arguments], sort_keys=True)
