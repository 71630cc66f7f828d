"""Ratchet: make LLM agents better from their own verified experience.

The public API is what ``__all__`` lists; everything else is internal.
"""

from ratchet.agent import Agent, Exemplar, Insight, load_agent
from ratchet.check import CheckReport, CheckResult, check_env
from ratchet.env import Env, Observation, Session, SimpleEnv, ToolSession
from ratchet.gate import GateConfig, GateDecision, decide
from ratchet.harness import Episode, Limits
from ratchet.improve import ImproveConfig, cached_backends, improve
from ratchet.levers import Lever, LeverContext, make_levers
from ratchet.metrics import Metrics, summarize
from ratchet.models import Completion, Model, ModelError, Prompt, Sampling, make_model
from ratchet.registry import UnknownEnvError, env_names, make_env, register_env
from ratchet.rollout import RolloutConfig, rollout
from ratchet.store import Store
from ratchet.task import Split, Task, TaskSpec, generate_tasks
from ratchet.tool import Tool, ToolCall, ToolError
from ratchet.trajectory import Step, Trajectory, play
from ratchet.verdict import Verdict

__all__ = [
    "Agent",
    "CheckReport",
    "CheckResult",
    "Completion",
    "Env",
    "Episode",
    "Exemplar",
    "GateConfig",
    "GateDecision",
    "ImproveConfig",
    "Insight",
    "Lever",
    "LeverContext",
    "Limits",
    "Metrics",
    "Model",
    "ModelError",
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
    "decide",
    "env_names",
    "generate_tasks",
    "improve",
    "load_agent",
    "make_env",
    "make_levers",
    "make_model",
    "play",
    "register_env",
    "rollout",
    "summarize",
]
