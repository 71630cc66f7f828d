"""Ratchet: make LLM agents better from their own verified experience.

The public API is what ``__all__`` lists; everything else is internal.
"""

from ratchet.check import CheckReport, CheckResult, check_env
from ratchet.env import Env, Observation, Session, SimpleEnv, ToolSession
from ratchet.registry import UnknownEnvError, env_names, make_env, register_env
from ratchet.task import Split, Task, TaskSpec, generate_tasks
from ratchet.tool import Tool, ToolCall, ToolError
from ratchet.trajectory import Step, Trajectory, play
from ratchet.verdict import Verdict

__all__ = [
    "CheckReport",
    "CheckResult",
    "Env",
    "Observation",
    "Session",
    "SimpleEnv",
    "Split",
    "Step",
    "Task",
    "TaskSpec",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolSession",
    "Trajectory",
    "UnknownEnvError",
    "Verdict",
    "check_env",
    "env_names",
    "generate_tasks",
    "make_env",
    "play",
    "register_env",
]
