"""Exploration: how an improvement run finds successes its agent cannot yet reach.

One mechanism, in one home, wrapped around the episode's policy (the engine sees only its
:class:`~ratchet.engine.rollout.Steering` seam). Each round every training task is sampled as
the agent is; a task none of whose samples passed is searched as a tree of agent steps
(:mod:`.tree`): from a state its episodes reached, restored by replaying their actions on a
fresh session, the agent's own policy proposes an action not tried there and plays on
(:mod:`.branch`), under a proposal strategy (:mod:`.strategies`) that the scheduler
(:mod:`.bandit`) picks by its measured yield of verified successes per token. Siblings that
share a prefix are what the ``pairs`` and ``grpo`` levers contrast (:mod:`.credit`).
Nothing here reads the oracle, a task's hidden params, or its difficulty as a plan length;
probe and test episodes are never steered.
"""

from ratchet.improve.explore.search import Explored, SearchConfig, explore

__all__ = ["Explored", "SearchConfig", "explore"]
