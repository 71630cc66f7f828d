"""Integrations: bridges between Ratchet and the ecosystem's env, tool and trainer formats.

In (outside things become Ratchet envs and tools):

- :mod:`~ratchet.integrations.dataset`: rows or a Hugging Face ``datasets`` dataset with a question
  and an answer column, with the dataset's own splits;
- :mod:`~ratchet.integrations.mcp`: the tools of any MCP server (stdio or streamable HTTP);
- :mod:`~ratchet.integrations.openenv`: any OpenEnv environment server (WebSocket sessions);
- :mod:`~ratchet.integrations.harbor`: Harbor task directories, run in Ratchet's sandbox.

Out (Ratchet envs for other trainers):

- :mod:`~ratchet.integrations.trl`: any env as a TRL ``environment_factory`` class;
- :mod:`~ratchet.integrations.openenv_server`: any env as an OpenEnv server.

Each module imports its heavy dependency (``mcp``, ``websockets``, ``openenv``, ``trl``) only
when used; install them with ``pip install 'ratchet[integrations]'``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ratchet.integrations.dataset import dataset_env, exact_match, numeric_match
    from ratchet.integrations.harbor import harbor_env, read_task
    from ratchet.integrations.mcp import HttpServer, MCPClient, StdioServer, mcp_env, mcp_tools
    from ratchet.integrations.openenv import openenv_env
    from ratchet.integrations.openenv_server import openenv_app
    from ratchet.integrations.trl import environment_factory, trl_dataset

_HOMES = {
    "dataset_env": "dataset",
    "exact_match": "dataset",
    "numeric_match": "dataset",
    "harbor_env": "harbor",
    "read_task": "harbor",
    "HttpServer": "mcp",
    "MCPClient": "mcp",
    "StdioServer": "mcp",
    "mcp_env": "mcp",
    "mcp_tools": "mcp",
    "openenv_env": "openenv",
    "openenv_app": "openenv_server",
    "environment_factory": "trl",
    "trl_dataset": "trl",
}
"""Each public name, and the module of this package it comes from."""

__all__ = [
    "HttpServer",
    "MCPClient",
    "StdioServer",
    "dataset_env",
    "environment_factory",
    "exact_match",
    "harbor_env",
    "mcp_env",
    "mcp_tools",
    "numeric_match",
    "openenv_app",
    "openenv_env",
    "read_task",
    "trl_dataset",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first asked for (they are heavy)."""
    if name not in _HOMES:
        raise AttributeError(f"module 'ratchet.integrations' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ratchet.integrations.{_HOMES[name]}"), name)
