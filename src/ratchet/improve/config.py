"""Settings of an improvement run: one declaration, used by the library, the CLI and the docs.

The defaults are the CPU preset: what ``ratchet improve ENV`` does with no options, and what
``ImproveConfig(env="calc")`` does from Python. They fit a laptop CPU and the embedded 135M
model (the demo runs them); a GPU server with a larger model can afford more rounds, tasks,
difficulties and levers. The command line derives its options from these fields (see
:mod:`ratchet.cli.options`), so a default or a help text is written here and nowhere else.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ratchet.engine.harness import Budget
from ratchet.engine.rollout import RolloutConfig
from ratchet.improve.explore import SearchConfig
from ratchet.improve.gate import GateConfig
from ratchet.improve.levers import BUILTIN, WEIGHT_LEVERS
from ratchet.improve.levers.options import checked_lever_options, parse_lever_options

EXPLORE_MODES = ("auto", "off")
"""The values of :attr:`ImproveConfig.explore`."""

CPU_ROLLOUT = RolloutConfig(concurrency=16, budget=Budget(max_turns=None))


@dataclass(frozen=True)
class ImproveConfig:
    """Settings of one improvement run (saved with it; a resumed run must match).

    Attributes:
        env: Env name, ``module:attr`` or ``file.py:attr``, or several joined by commas as
            one suite (``calc,grid``).
        model: Model of the base agent: ``local``, ``local:PATH``, ``openai:NAME`` or ``fake``.
        levers: Levers to try each round, in order (exemplars, insights, rft, pairs, grpo,
            demos, skills, prompt, tasks; see docs/improve.md#levers).
        rounds: Rounds to run.
        train_tasks: Training tasks per round.
        train_k: Samples per training task (exploration).
        probe_tasks: Probe tasks drawn fresh each round for the gate.
        probe_k: Samples per probe task.
        test_tasks: Held-out test tasks that measure the base and final agents (no decision
            uses them).
        test_k: Samples per test task.
        max_difficulty: Highest difficulty practised, probed and tested.
        probe_all_levels: Probe every level up to ``max_difficulty`` each round, not only the
            levels the curriculum has opened.
        temperature: Sampling temperature of the agents (probe and test episodes).
        explore: How training tasks are explored: ``auto`` samples each task ``train_k``
            times and searches the unsolved ones, ``off`` only samples.
        seed: Master seed of tasks, samples and training.
        reflector: Model for levers that reflect on experience (default: the agent's).
        curve: Test every newly accepted version too, for the learning curve.
        train_steps: Optimiser steps of each weight-lever proposal (rft takes more for more
            successes, see ``rft.epochs``; ``rft.steps=N`` sets one lever's).
        weights: Hugging Face weights of a served model (``openai:NAME``), from which the
            weight levers train adapters and register them on the server.
        experience: A store whose verified training episodes join the experience (recorded
            ``ratchet serve`` traffic with feedback, or train episodes of this env).
        lever_options: A lever's setting as ``LEVER.FIELD=VALUE``, e.g. ``pairs.beta=0.1``
            (repeatable; see docs/improve.md#lever-options).
        learning_rate: Deprecated (goes in the next release): ``learning_rate`` of each
            weight lever in the run, as lever options.
        beta: Deprecated (goes in the next release): ``pairs.beta`` and ``grpo.beta``.
        chosen_nll_weight: Deprecated (goes in the next release): ``pairs.chosen_nll_weight``.
        anchor_weight: Deprecated (goes in the next release): ``pairs.anchor_weight``.
        train_length_exponent: Deprecated (goes in the next release): ``rft.length_exponent``.
        demos: Deprecated (goes in the next release): ``demos.source``.
        rollout: Concurrency, reply cap and per-episode budgets (``max_turns`` unset is
            ``max_difficulty`` plus two).
        gate: The gate's error budget and regression budget.
        search: The explorer's research knobs, set from Python only
            (:class:`~ratchet.improve.explore.SearchConfig`).
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
    weights: str | None = None
    experience: str | None = None
    lever_options: dict[str, dict[str, Any]] = field(
        default_factory=dict,
        metadata={"flag": "--lever-option", "metavar": "LEVER.FIELD=VALUE",
                  "parse": parse_lever_options},
    )  # fmt: skip
    learning_rate: float | None = field(default=None, metadata={"moved": WEIGHT_LEVERS})
    beta: float | None = field(default=None, metadata={"moved": ("pairs", "grpo")})
    chosen_nll_weight: float | None = field(default=None, metadata={"moved": ("pairs",)})
    anchor_weight: float | None = field(default=None, metadata={"moved": ("pairs",)})
    train_length_exponent: float | None = field(
        default=None, metadata={"moved": ("rft",), "field": "length_exponent"}
    )
    demos: str | None = field(default=None, metadata={"moved": ("demos",), "field": "source"})
    rollout: RolloutConfig = field(default_factory=lambda: CPU_ROLLOUT)
    gate: GateConfig = field(default_factory=GateConfig)
    search: SearchConfig = field(default_factory=SearchConfig, metadata={"cli": False})

    def __post_init__(self) -> None:
        """Refuse settings that cannot work before any episode is played.

        A deprecated lever setting (``beta=``, ...) moves into :attr:`lever_options` with a
        ``DeprecationWarning``, for the levers of the run whose default it changes.

        Raises:
            ValueError: If ``rounds`` is below 1, ``explore`` is not a mode of
                :data:`EXPLORE_MODES`, a lever option does not fit its lever (see
                :func:`~ratchet.improve.levers.options.checked_lever_options`) or its lever
                refuses it, or the demos lever is asked for with a source that is neither
                ``oracle``, ``teacher`` (with a reflector) nor an existing file.
        """
        if self.rounds < 1:
            raise ValueError(
                f"--rounds must be at least 1 (a round practises, then gates); got {self.rounds}"
            )
        if self.explore not in EXPLORE_MODES:
            raise ValueError(
                f"--explore is one of {', '.join(EXPLORE_MODES)}, not {self.explore!r}"
            )
        given = {lever: dict(values) for lever, values in self.lever_options.items()}
        for name, targets, value in _deprecated(self):
            new = " ".join(f"--lever-option {target}={value}" for target in targets)
            warnings.warn(
                f"ImproveConfig({name}=...) and --{name.replace('_', '-')} are deprecated and go "
                f"in the next release; use {new} (ImproveConfig.lever_options)",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, name, None)
            for target in targets:
                lever, _, setting = target.partition(".")
                # A lever the run does not use ignores it, as before; a default adds nothing.
                if lever in self.levers and getattr(BUILTIN[lever], setting) != value:
                    given.setdefault(lever, {}).setdefault(setting, value)
        options = checked_lever_options(given, self.levers)
        object.__setattr__(self, "lever_options", options)
        for lever, values in options.items():
            BUILTIN[lever](**values)  # a lever refuses settings it cannot work with
        source = options.get("demos", {}).get("source", "oracle")
        if "demos" not in self.levers or source == "oracle":
            return
        if source == "teacher" and self.reflector is None:
            raise ValueError(
                "--lever-option demos.source=teacher plays the --reflector model: pass "
                "--reflector MODEL"
            )
        if source != "teacher" and not Path(source).expanduser().is_file():
            raise ValueError(
                f"--lever-option demos.source={source!r} is neither oracle, teacher nor a "
                "JSONL file"
            )

    def budget(self) -> Budget:
        """The per-episode budget, with ``max_turns`` derived from the difficulty if unset."""
        budget = self.rollout.budget or Budget(max_turns=None)
        if budget.max_turns is None:
            budget = replace(budget, max_turns=self.max_difficulty + 2)
        return budget

    def lever_arguments(self) -> dict[str, dict[str, Any]]:
        """Keyword arguments of each built-in lever of the run, by lever name.

        The weight levers' ``steps`` is :attr:`train_steps`; the lever options come on top.
        """
        return {
            lever: {
                **({"steps": self.train_steps} if lever in WEIGHT_LEVERS else {}),
                **self.lever_options.get(lever, {}),
            }
            for lever in self.levers
            if lever in BUILTIN
        }


def _deprecated(config: ImproveConfig) -> list[tuple[str, list[str], Any]]:
    """The deprecated lever settings ``config`` was given: field, its lever options, value.

    The lever options are ``LEVER.FIELD`` for each lever the setting reaches.
    """
    found = []
    for item in fields(config):
        value = getattr(config, item.name)
        if "moved" in item.metadata and value is not None:
            setting = item.metadata.get("field", item.name)
            targets = [f"{lever}.{setting}" for lever in item.metadata["moved"]]
            found.append((item.name, targets, value))
    return found
