"""Exemplar memory: the agent's own verified successes, retrieved as demonstrations.

The candidate keeps a pool of successful training episodes (one per task, the shortest); at
run time the harness retrieves the most similar ones for each task (BM25, see
:mod:`ratchet.core.memory`) and shows them as earlier conversations, within a token budget.
A served conversation with turns its client wrote (:attr:`~ratchet.core.trajectory.Step.given`)
is never one: those turns were not the agent's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ratchet.core.agent import Agent
from ratchet.core.memory import to_exemplar
from ratchet.core.trajectory import Trajectory
from ratchet.improve.levers.base import LeverContext, NoCandidate


@dataclass(frozen=True)
class ExemplarLever:
    """Propose the incumbent plus a pool of verified successful episodes as demonstrations.

    Attributes:
        pool_size: Most exemplars kept (the newest win when there are more).
        per_task: Demonstrations shown per task.
    """

    pool_size: int = 256
    per_task: int = 2
    name: str = "exemplars"

    def propose(self, context: LeverContext) -> Agent | None:
        """Return the candidate, or ``None`` when there is no success that is not already kept."""
        best: dict[str, Trajectory] = {}
        for trajectory in context.experience:
            if (
                not trajectory.passed
                or trajectory.errors
                or trajectory.given_turns  # a client's turns are never shown as the agent's
                or trajectory.task.env != context.env.name
            ):
                continue
            kept = best.get(trajectory.task.instruction)
            if kept is None or len(trajectory.steps) < len(kept.steps):
                best[trajectory.task.instruction] = trajectory
        pool = [to_exemplar(t) for t in best.values()][-self.pool_size :]
        known = {e.instruction for e in context.incumbent.exemplars}
        if not pool:
            raise NoCandidate("no verified error-free success yet")
        if {e.instruction for e in pool} <= known:
            raise NoCandidate("every verified success is already an exemplar")
        return context.incumbent.derive(
            context.version,
            self.name,
            exemplars=tuple(pool),
            exemplars_per_task=self.per_task,
        )
