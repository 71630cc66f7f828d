"""One batch of episodes to play, here (:meth:`RolloutRequest.play`) or on Ray workers.

A caller describes the batch once and hands it to whichever player it has: the same request
played here with a model, or by a :class:`~ratchet.engine.cluster.RayPool` that builds the
model on its workers, gives the same episodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from ratchet.core.agent import Agent
from ratchet.core.env import Env
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.models import Model
from ratchet.engine.rollout import RolloutConfig, Steer, rollout


@dataclass(frozen=True)
class RolloutRequest:
    """Every task of a batch played ``k`` times by one agent.

    The fields are :func:`~ratchet.engine.rollout.rollout`'s arguments of the same names, but
    for the model, which the player supplies, and ``agent_dir``: the agent's directory (its
    adapter), where Ray workers build its model from.
    """

    env: Env
    tasks: Sequence[Task]
    agent: Agent
    config: RolloutConfig | None = None
    agent_dir: Path | None = None
    k: int = 1
    seed: int = 0
    first_sample: int = 0
    skip: set[tuple[str, int]] | None = None
    on_trajectory: Callable[[Trajectory], object] | None = None
    progress: Progress | None = None
    description: str = "rollouts"
    steer: Steer | None = None

    def play(self, model: Model | None) -> list[Trajectory]:
        """Play the batch here with ``model`` and return the trajectories in task order.

        Raises:
            ValueError: If a model-driven agent is given no model.
            ModelError: If the backend cannot work at all.
        """
        return rollout(
            self.env,
            self.tasks,
            self.agent,
            model,
            self.config,
            k=self.k,
            seed=self.seed,
            first_sample=self.first_sample,
            skip=self.skip,
            on_trajectory=self.on_trajectory,
            progress=self.progress,
            description=self.description,
            steer=self.steer,
        )
