"""Public names renamed in the last release, kept working until the next one with a warning.

``ratchet.Limits`` is now :class:`ratchet.Budget`, ``ratchet.play`` :func:`ratchet.replay` and
``ratchet.decide`` :func:`ratchet.decide_round`; each old name still works and raises a
``DeprecationWarning`` when it is looked up. ``SimpleEnv(check=, solve=, relabel=)``, now
``verify=``, ``oracle=`` and ``describe=``, is handled by :class:`ratchet.SimpleEnv` itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.env import Env
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import Budget, replay
from ratchet.improve.gate import GateConfig, GateDecision, decide_round


def play(env: Env, task: Task, calls: Sequence[ToolCall], agent: str = "scripted") -> Trajectory:
    """The old :func:`ratchet.replay`, which named the agent by its version alone."""
    return replay(env, task, calls, Agent(version=agent, model="scripted"))


def decide(
    incumbent: Sequence[Trajectory], candidate: Sequence[Trajectory], config: GateConfig
) -> GateDecision:
    """The old one-candidate gate: :func:`ratchet.decide_round` with the whole ``alpha``."""
    return decide_round(incumbent, {"candidate": candidate}, config, config.alpha)[0]


RENAMED: dict[str, tuple[str, Any]] = {
    "Limits": ("Budget", Budget),
    "play": ("replay", play),
    "decide": ("decide_round", decide),
}
"""Old public name: its new name, and what the old name still gives."""


def renamed_attribute(name: str) -> Any:
    """``ratchet``'s module ``__getattr__``: an old name, with a warning naming the new one.

    Raises:
        AttributeError: For any other name.
    """
    if name not in RENAMED:
        raise AttributeError(f"module 'ratchet' has no attribute {name!r}")
    new, value = RENAMED[name]
    warnings.warn(
        f"ratchet.{name} is deprecated and goes in the next release; use ratchet.{new}",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
