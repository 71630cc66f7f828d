"""Settings of an improvement run: one declaration, used by the library, the CLI and the docs.

The defaults are the CPU preset: what ``ratchet improve ENV`` does with no options, and what
``ImproveConfig(env="calc")`` does from Python. They fit a laptop CPU and the embedded 135M
model (the demo runs them); a GPU server with a larger model can afford more rounds, tasks,
difficulties and levers. The command line derives its options from these fields (see
:mod:`ratchet.cli.options`), so a default or a help text is written here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ratchet.engine.harness import Budget
from ratchet.engine.rollout import RolloutConfig
from ratchet.improve.gate import GateConfig

CPU_ROLLOUT = RolloutConfig(concurrency=16, max_reply_tokens=48, budget=Budget(max_turns=None))


@dataclass(frozen=True)
class ImproveConfig:
    """Settings of one improvement run (saved with it; a resumed run must match).

    Attributes:
        env: Env name (or ``module:attr`` / ``file.py:attr`` reference).
        model: Model reference of the base agent.
        levers: Levers to try each round, by name, in order; any of exemplars, insights, rft,
            skills, prompt, tasks.
        rounds: Rounds to run.
        train_tasks: Training tasks per round.
        train_k: Samples per training task (exploration).
        probe_tasks: Probe tasks drawn fresh each round for the gate.
        probe_k: Samples per probe task.
        test_tasks: Held-out test tasks (base and final are measured on them; no decision is).
        test_k: Samples per test task.
        max_difficulty: Highest difficulty practised, probed and tested.
        temperature: Sampling temperature of the agents (probe and test episodes).
        explore_temperature: Sampling temperature of training episodes.
        seed: Master seed: tasks, samples, training.
        reflector: Model reference for levers that reflect on experience (default: the agent's).
        curve: Test every newly accepted version too, for the learning curve.
        train_steps: Optimiser steps of each weight-lever proposal.
        rollout: Concurrency, reply cap and per-episode budgets (``max_turns`` unset means
            the highest difficulty plus two).
        gate: The gate's error budget and regression budget.
    """

    env: str
    model: str = "local"
    levers: tuple[str, ...] = ("exemplars", "rft")
    rounds: int = 2
    train_tasks: int = 32
    train_k: int = 2
    probe_tasks: int = 24
    probe_k: int = 1
    test_tasks: int = 36
    test_k: int = 1
    max_difficulty: int = 1
    temperature: float = 0.7
    explore_temperature: float = 1.0
    seed: int = 0
    reflector: str | None = None
    curve: bool = True
    train_steps: int = 30
    rollout: RolloutConfig = field(default_factory=lambda: CPU_ROLLOUT)
    gate: GateConfig = field(default_factory=GateConfig)

    def budget(self) -> Budget:
        """The per-episode budget, with ``max_turns`` derived from the difficulty if unset."""
        budget = self.rollout.budget or Budget(max_turns=None)
        if budget.max_turns is None:
            budget = replace(budget, max_turns=self.max_difficulty + 2)
        return budget
