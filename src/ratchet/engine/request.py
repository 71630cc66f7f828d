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
    """Every task of a batch played ``k`` times by one agent (see :func:`~.rollout.rollout`).

    Attributes:
        env: The env the tasks come from.
        tasks: Tasks to play.
        agent: The agent; ``oracle`` and ``null`` run without a model.
        config: Concurrency, reply cap and budgets (``None``: the defaults).
        agent_dir: The agent's directory (its adapter), where workers build its model from.
        k: Samples per task.
        seed: Base sampling seed; each episode derives its own from it, its task and sample.
        first_sample: Number the samples from here (so repeated rounds on a task stay distinct).
        skip: ``(task_id, sample)`` pairs already done (for resume).
        on_trajectory: Called with each trajectory, in task order, once it and every earlier
            one are finished.
        progress: A rich progress display to add a bar to; ``None`` shows none.
        description: Label for the progress bar.
        steer: ``steer(task, sample)``: how each episode explores; ``None``: the agent as it is.
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
