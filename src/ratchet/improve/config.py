"""Settings of an improvement run: one declaration, used by the library, the CLI and the docs.

The defaults are the CPU preset: what ``ratchet improve ENV`` does with no options, and what
``ImproveConfig(env="calc")`` does from Python. They fit a laptop CPU and the embedded 135M
model (the demo runs them); a GPU server with a larger model can afford more rounds, tasks,
difficulties and levers. The command line derives its options from these fields (see
:mod:`ratchet.cli.options`), so a default or a help text is written here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ratchet.engine.harness import Budget
from ratchet.engine.rollout import RolloutConfig
from ratchet.improve.explore import SearchConfig
from ratchet.improve.gate import GateConfig

EXPLORE_MODES = ("auto", "off")
"""The values of :attr:`ImproveConfig.explore`."""

CPU_ROLLOUT = RolloutConfig(concurrency=16, budget=Budget(max_turns=None))


@dataclass(frozen=True)
class ImproveConfig:
    """Settings of one improvement run (saved with it; a resumed run must match).

    Attributes:
        env: Env name (or ``module:attr`` / ``file.py:attr`` reference), or several joined by
            commas: one suite of those envs (``calc,grid``; see docs/improve.md).
        model: Model reference of the base agent.
        levers: Levers to try each round, by name, in order: exemplars (verified episodes as
            demonstrations), insights (rules from a reflector), rft (LoRA fine-tuning on
            verified successes), pairs (DPO on the action that parted a success from a failure
            of the same task), grpo (group-relative policy updates over each task's samples;
            follows rft), demos (fine-tuning on outside demonstrations: privileged, never
            counted as self-improvement), skills (tool-call procedures offered as tools), prompt
            (system prompt and guidance evolved by reflection), tasks (practice tasks aimed at
            the agent's failures).
        rounds: Rounds to run.
        train_tasks: Training tasks per round.
        train_k: Samples per training task (exploration).
        probe_tasks: Probe tasks drawn fresh each round for the gate.
        probe_k: Samples per probe task.
        test_tasks: Held-out test tasks (base and final are measured on them; no decision is).
        test_k: Samples per test task.
        max_difficulty: Highest difficulty practised, probed and tested.
        probe_all_levels: Probe every level up to ``max_difficulty`` each round; unset: only
            the levels the curriculum has open (the work being practised, so a gain there is
            not diluted by levels no candidate can reach yet). Test always covers every level.
        temperature: Sampling temperature of the agents (probe and test episodes).
        explore: How training tasks are explored: ``auto`` samples each task ``train_k``
            times, then searches the ones no sample solved (branching from the states their
            episodes reached, with proposal strategies chosen by their measured yield; see
            docs/improve.md); ``off`` only samples.
        seed: Master seed: tasks, samples, training.
        reflector: Model reference for levers that reflect on experience (default: the agent's).
        curve: Test every newly accepted version too, for the learning curve.
        train_steps: Optimiser steps of each weight-lever proposal.
        train_length_exponent: How ``rft``'s batches share out over episode lengths
            (numbers of actions): each length in proportion to its number of verified
            successes raised to this power, in ``[0, 1]``. 1 keeps each length's share of the
            successes; 0.5, the default, draws a rarer, longer length more often (in proportion
            to the square root of its count), so a new level's few successes are not drowned by
            the level below.
        weights: For a served model (openai:NAME), its Hugging Face weights: weight levers
            train adapters from them and register them on the server (dynamic LoRA).
        experience: A store whose verified training episodes join the experience: recorded
            traffic with feedback (ratchet serve) and train episodes of this env.
        learning_rate: Learning rate of the weight levers; unset: each lever's own (1e-3 for
            rft and demos, 2e-4 for pairs and grpo).
        beta: How strongly pairs (DPO's beta) and grpo (its KL weight) hold the policy to the
            incumbent; unset: each lever's own (0.1 and 0.04).
        chosen_nll_weight: pairs' SFT term: each pair's chosen action's mean token negative
            log-likelihood, times this, joins its DPO loss (RPO; TRL's rpo_alpha), so DPO
            cannot widen a margin only by sinking the rejected action; 0 is plain DPO.
        anchor_weight: pairs' anchor: the verified training episodes (what rft trains on)
            join its DPO loss as an SFT term, times this, so the states no pair covers keep
            their actions (without it, pairs mined at level 2 unlearned level 1); 0 leaves
            them out.
        demos: Where the demos lever's demonstrations come from: oracle (the env's solutions),
            teacher (the --reflector model) or the path of a JSONL export.
        rollout: Concurrency, reply cap and per-episode budgets (``max_turns`` unset means
            the highest difficulty plus two).
        gate: The gate's error budget and regression budget.
        search: The explorer's research knobs (from Python only; see
            :class:`~ratchet.improve.explore.SearchConfig`).
    """

    env: str
    model: str = "local"
    levers: tuple[str, ...] = ("exemplars", "rft")
    rounds: int = 3
    train_tasks: int = 32
    train_k: int = 2
    probe_tasks: int = 24
    probe_k: int = 1
    test_tasks: int = 36
    test_k: int = 1
    max_difficulty: int = 1
    probe_all_levels: bool = False
    temperature: float = 0.7
    explore: str = "auto"
    seed: int = 0
    reflector: str | None = None
    curve: bool = True
    train_steps: int = 30
    train_length_exponent: float = 0.5
    weights: str | None = None
    experience: str | None = None
    learning_rate: float | None = None
    beta: float | None = None
    chosen_nll_weight: float = 0.0
    anchor_weight: float = 0.0
    demos: str = "oracle"
    rollout: RolloutConfig = field(default_factory=lambda: CPU_ROLLOUT)
    gate: GateConfig = field(default_factory=GateConfig)
    search: SearchConfig = field(default_factory=SearchConfig, metadata={"cli": False})

    def __post_init__(self) -> None:
        """Refuse settings that cannot work before any episode is played.

        Raises:
            ValueError: If ``rounds`` is below 1, ``explore`` is not a mode of
                :data:`EXPLORE_MODES`, ``train_length_exponent`` is outside 0-1,
                ``chosen_nll_weight`` or ``anchor_weight`` is negative, or the demos lever is
                asked for with a source that is neither ``oracle``, ``teacher`` (with a
                reflector) nor an existing file.
        """
        if self.rounds < 1:
            raise ValueError(
                f"--rounds must be at least 1 (a round practises, then gates); got {self.rounds}"
            )
        if self.explore not in EXPLORE_MODES:
            raise ValueError(
                f"--explore is one of {', '.join(EXPLORE_MODES)}, not {self.explore!r}"
            )
        if not 0.0 <= self.train_length_exponent <= 1.0:
            raise ValueError(
                f"--train-length-exponent is from 0 (every length drawn equally) to 1 (as "
                f"verified), not {self.train_length_exponent}"
            )
        for option, weight in (
            ("--chosen-nll-weight", self.chosen_nll_weight),
            ("--anchor-weight", self.anchor_weight),
        ):
            if weight < 0:
                raise ValueError(f"{option} weighs a loss term; it cannot be negative ({weight})")
        if "demos" not in self.levers or self.demos == "oracle":
            return
        if self.demos == "teacher" and self.reflector is None:
            raise ValueError("--demos teacher plays the --reflector model: pass --reflector MODEL")
        if self.demos != "teacher" and not Path(self.demos).expanduser().is_file():
            raise ValueError(f"--demos {self.demos!r} is neither oracle, teacher nor a JSONL file")

    def budget(self) -> Budget:
        """The per-episode budget, with ``max_turns`` derived from the difficulty if unset."""
        budget = self.rollout.budget or Budget(max_turns=None)
        if budget.max_turns is None:
            budget = replace(budget, max_turns=self.max_difficulty + 2)
        return budget

    def lever_options(self) -> dict[str, dict[str, Any]]:
        """Keyword arguments of the built-in levers these settings tune, by lever name."""
        weights: dict[str, Any] = {"steps": self.train_steps}
        if self.learning_rate is not None:
            weights["learning_rate"] = self.learning_rate
        policy = {**weights, **({} if self.beta is None else {"beta": self.beta})}
        return {
            "rft": {**weights, "length_exponent": self.train_length_exponent},
            "pairs": {
                **policy,
                "chosen_nll_weight": self.chosen_nll_weight,
                "anchor_weight": self.anchor_weight,
            },
            "grpo": policy,
            "demos": {**weights, "source": self.demos},
        }
