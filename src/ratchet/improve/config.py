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
from ratchet.improve.gate import GateConfig

CPU_ROLLOUT = RolloutConfig(concurrency=16, max_reply_tokens=48, budget=Budget(max_turns=None))


@dataclass(frozen=True)
class ImproveConfig:
    """Settings of one improvement run (saved with it; a resumed run must match).

    Attributes:
        env: Env name (or ``module:attr`` / ``file.py:attr`` reference).
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
        explore_temperature: Sampling temperature of training episodes; unset: chosen per task
            from the incumbent's success on it (or its family and difficulty), spread over the
            k samples.
        explore_guided_share: Share of each task's training samples the explore options
            below guide (spread evenly over the k samples: 0.5 guides every second one, 1.0
            all of them, 0 none). The other samples play the agent as it is, for the pairs
            and grpo levers to contrast; at a level the agent cannot yet start they fail
            alike, and guiding all of them finds more successes and relabels there.
        explore_past_finish: Offer ``finish`` to the guided training samples of a level-L
            task only after L acting calls, calls to tools that take arguments (the prompt is
            unchanged; the decoder enforces it), so an agent that learned to finish early
            still tries the longer plans the next level needs; a call without arguments only
            reads (grid's ``look``) and is no step of a plan. Probe and test episodes are
            never constrained.
        explore_first_tool: Open the guided training samples with a call to a tool drawn
            per episode (any but ``finish``; the decoder enforces it), for an agent that
            always opens with the same call and so never sees what the other tools return.
            Every second draw is among the tools the task names by their verb (``move_file``
            for "move a.log into logs/", see :func:`~ratchet.engine.rollout.drawn_tool`).
            Probe and test episodes are never constrained.
        explore_last_tool: Make every second guided sample of a task (the second, fourth,
            ...) call a tool drawn per episode at the last step before ``finish`` is offered
            (its L-th acting call on a level-L task with ``explore_past_finish``, else its
            first). The ladders add one step per level, so an agent that mastered the level below
            makes the earlier calls right and the new last one the same wrong way on every
            sample (calc: ``divide`` for "grows to 8 times"); the drawn call gives a task's
            samples a last step the agent would not have chosen.
        explore_copy_arguments: Make those same samples copy every free string and number
            argument from the conversation (a word, phrase or value it was shown; the decoder
            enforces it), for an agent that picks the right tool but invents its arguments.
        explore_chain: Make those copying samples take up each result: every call after a
            successful one copies at least one argument from that call's result (the decoder
            enforces it), for an agent that, made to go on, repeats its first call's arguments
            instead of acting on what the call returned. Needs ``explore_copy_arguments``.
        explore_fresh_arguments: Make those copying samples spend each value: a value an earlier
            call of the episode passed is no longer offered, unless mentioned again (a result, a
            number given twice; the decoder enforces it), and a result given once is passed in
            one argument of a call only, for an agent that, made to take up a result, passes
            the first call's operands or the result itself again beside it instead of the next
            given value. Needs ``explore_copy_arguments``.
        explore_skip_repeats: Never let a training sample call a tool that takes no
            arguments right after calling it (the decoder enforces it): nothing happened in
            between, so the call would only repeat its result. For an agent that loops on one
            call (a look or a listing) until its turns run out.
        seed: Master seed: tasks, samples, training.
        reflector: Model reference for levers that reflect on experience (default: the agent's).
        curve: Test every newly accepted version too, for the learning curve.
        train_steps: Optimiser steps of each weight-lever proposal.
        train_length_exponent: How ``rft``'s batches share out over episode lengths
            (numbers of actions): each length in proportion to its number of verified
            successes raised to this power, in ``[0, 1]``. 1 keeps each length's share of the
            successes; 0.5 draws a rarer, longer length more often (in proportion to the
            square root of its count), for a run whose few successes at a new level are
            drowned by the level below.
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
    probe_all_levels: bool = False
    temperature: float = 0.7
    explore_temperature: float | None = None
    explore_guided_share: float = 0.5
    explore_past_finish: bool = True
    explore_first_tool: bool = False
    explore_last_tool: bool = False
    explore_copy_arguments: bool = False
    explore_chain: bool = False
    explore_fresh_arguments: bool = False
    explore_skip_repeats: bool = False
    seed: int = 0
    reflector: str | None = None
    curve: bool = True
    train_steps: int = 30
    train_length_exponent: float = 1.0
    weights: str | None = None
    experience: str | None = None
    learning_rate: float | None = None
    beta: float | None = None
    chosen_nll_weight: float = 0.0
    anchor_weight: float = 0.0
    demos: str = "oracle"
    rollout: RolloutConfig = field(default_factory=lambda: CPU_ROLLOUT)
    gate: GateConfig = field(default_factory=GateConfig)

    def __post_init__(self) -> None:
        """Refuse settings that cannot work before any episode is played.

        Raises:
            ValueError: If ``explore_guided_share`` or ``train_length_exponent`` is outside
                0-1, ``chosen_nll_weight`` or ``anchor_weight`` is negative, ``explore_chain`` or
                ``explore_fresh_arguments`` is set without ``explore_copy_arguments``, or the
                demos lever is asked for with a source that is neither ``oracle``, ``teacher``
                (with a reflector) nor an existing file.
        """
        if not 0.0 <= self.explore_guided_share <= 1.0:
            raise ValueError(
                f"--explore-guided-share is a share of the samples, from 0 to 1, not "
                f"{self.explore_guided_share}"
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
        if self.explore_chain and not self.explore_copy_arguments:
            raise ValueError(
                "--explore-chain needs --explore-copy-arguments: it copies from results"
            )
        if self.explore_fresh_arguments and not self.explore_copy_arguments:
            raise ValueError(
                "--explore-fresh-arguments needs --explore-copy-arguments: it narrows what "
                "arguments are copied from"
            )
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
