"""Ratchet: make LLM agents better from their own verified experience.

The public API is what ``__all__`` lists; everything else is internal. Names renamed in the
last release still work, with a ``DeprecationWarning``, until the next (see
``ratchet._renamed``). The package is laid
out by concept: ``core`` (records and protocols), ``envs`` (built-in envs, registry, checks),
``engine`` (models, the episode loop, rollouts, the store), ``improve`` (the loop, gate,
hindsight, levers), ``report`` and ``sandbox``.
"""

from ratchet._renamed import renamed_attribute as __getattr__  # noqa: F401 (PEP 562 hook)
from ratchet.core.agent import Agent, load_agent
from ratchet.core.env import Env, EnvDefaults, Session, SimpleEnv, ToolSession, end_episode
from ratchet.core.memory import Exemplar, Insight
from ratchet.core.pool import TaskPool
from ratchet.core.task import Split, Task, TaskSpec, generate_tasks, make_task
from ratchet.core.tool import Tool, ToolCall, ToolError
from ratchet.core.trajectory import InfrastructureError, Observation, Step, Trajectory
from ratchet.core.verdict import Verdict
from ratchet.engine.harness import Budget, replay, run_episode
from ratchet.engine.metrics import Metrics, summarize
from ratchet.engine.models import (
    Completion,
    Model,
    ModelError,
    Prompt,
    Sampling,
    cached_backends,
    make_model,
)
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.engine.store import Store
from ratchet.envs.check import CheckReport, CheckResult, check_env
from ratchet.envs.registry import UnknownEnvError, env_names, make_env, register_env
from ratchet.improve.config import ImproveConfig
from ratchet.improve.gate import GateConfig, GateDecision, decide_round
from ratchet.improve.levers import Lever, LeverContext, NoCandidate, make_levers
from ratchet.improve.loop import improve

__all__ = [
    "Agent",
    "Budget",
    "CheckReport",
    "CheckResult",
    "Completion",
    "Env",
    "EnvDefaults",
    "Exemplar",
    "GateConfig",
    "GateDecision",
    "ImproveConfig",
    "InfrastructureError",
    "Insight",
    "Lever",
    "LeverContext",
    "Metrics",
    "Model",
    "ModelError",
    "NoCandidate",
    "Observation",
    "Prompt",
    "RolloutConfig",
    "Sampling",
    "Session",
    "SimpleEnv",
    "Split",
    "Step",
    "Store",
    "Task",
    "TaskPool",
    "TaskSpec",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolSession",
    "Trajectory",
    "UnknownEnvError",
    "Verdict",
    "cached_backends",
    "check_env",
    "decide_round",
    "end_episode",
    "env_names",
    "generate_tasks",
    "improve",
    "load_agent",
    "make_env",
    "make_levers",
    "make_model",
    "make_task",
    "register_env",
    "replay",
    "rollout",
    "run_episode",
    "summarize",
]
