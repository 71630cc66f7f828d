"""MCP servers as Ratchet tools and envs, through the official ``mcp`` SDK.

:func:`mcp_tools` turns the tools of a server (reached through an
:class:`~ratchet.integrations.mcp_client.MCPClient`, over stdio or streamable HTTP) into Ratchet
:class:`~ratchet.core.tool.Tool` objects with the server's own JSON schemas. :func:`mcp_env`
makes an env from a server plus your tasks, verifier and oracle: each episode gets its own
connection (its own server process, for stdio), the agent sees every server tool except the
``hidden`` ones, and the verifier reads the world through the same connection (often through a
hidden tool such as ``state``), never from the agent's claims. A tool failure the server
reports (``isError``) becomes an error observation the agent can react to.

Starting a server process per episode costs a second or more; with ``reuse=True`` and a
``setup`` that resets the server's world for the task, processes are kept and reused.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Collection
from typing import Any

from ratchet.core.env import SimpleEnv
from ratchet.core.pool import TaskPool
from ratchet.core.task import Sampler, Task
from ratchet.core.tool import Tool, ToolCall
from ratchet.core.verdict import Verdict
from ratchet.integrations.mcp_client import HttpServer as HttpServer
from ratchet.integrations.mcp_client import MCPClient as MCPClient
from ratchet.integrations.mcp_client import Server as Server
from ratchet.integrations.mcp_client import StdioServer as StdioServer


def mcp_tools(client: MCPClient, hidden: Collection[str] = ()) -> list[Tool]:
    """Return the server's tools, except ``hidden``, as Ratchet tools calling ``client``.

    Each keeps the server's input schema; where that schema does not say whether arguments it
    does not declare are allowed, they are refused (``additionalProperties: false``), so a
    misspelt argument is an error the agent sees rather than one the server silently drops.
    """
    return [
        Tool.from_schema(
            spec["name"],
            spec.get("description") or spec["name"],
            {"additionalProperties": False, **(spec.get("inputSchema") or {"type": "object"})},
            _caller(client, spec["name"]),
        )
        for spec in client.tools
        if spec["name"] not in hidden
    ]


def mcp_env(
    server: Server,
    *,
    name: str,
    description: str,
    sample: Sampler | TaskPool,
    verify: Callable[[Task, MCPClient, str | None], Verdict],
    oracle: Callable[[Task], list[ToolCall]],
    setup: Callable[[Task, MCPClient], None] | None = None,
    hidden: Collection[str] = (),
    reuse: bool = False,
    timeout_s: float = 30.0,
    **options: Any,
) -> SimpleEnv[MCPClient]:
    """Return an env whose worlds are MCP server connections and whose tools are the server's.

    Args:
        server: The MCP server.
        name: The env's name.
        description: One line for ``ratchet envs``.
        sample: A sampler or a :class:`~ratchet.core.pool.TaskPool` of your tasks.
        verify: ``verify(task, client, answer) -> Verdict``; reads the world's state through
            ``client.call(...)`` (hidden tools are callable here).
        oracle: ``oracle(task) -> [ToolCall]``: server tool calls that solve the task, then
            ``finish``.
        setup: ``setup(task, client)``: prepares the world for a task (e.g. calls a hidden
            ``reset`` tool with the task's params) before the agent's first step.
        hidden: Server tools the agent does not see (setup and verification tools).
        reuse: Keep connections (and server processes) for later episodes; ``setup`` must
            then put the world back to the task's start.
        timeout_s: Longest wait for connecting and for each tool call.
        **options: Passed on to :class:`~ratchet.core.env.SimpleEnv` (``policy``,
            ``max_difficulty``, ``version``, ``problem_key``, ``observe``, ``thread_safe``,
            ``max_sessions``).

    Raises:
        ValueError: If ``reuse`` is asked for without a ``setup`` to reset the world.
    """
    if reuse and setup is None:
        raise ValueError("reuse=True needs a setup(task, client) that resets the server's world")
    connections = Connections(server, timeout_s, reuse)

    def build(task: Task) -> MCPClient:
        client = connections.take()
        try:
            if setup is not None:
                setup(task, client)
        except BaseException:
            client.close()
            raise
        return client

    return SimpleEnv(
        name=name,
        description=description,
        sample=sample,
        build=build,
        tools=lambda client: mcp_tools(client, hidden),
        verify=verify,
        oracle=oracle,
        teardown=connections.give_back,
        **options,
    )


class Connections:
    """Connections to one server: a fresh one per world, or reused ones kept idle.

    Args:
        server: The MCP server.
        timeout_s: Longest wait for connecting and for each tool call.
        reuse: Keep connections given back (and their server processes) for later worlds,
            closing the idle ones at exit; otherwise each is closed when given back.
    """

    def __init__(self, server: Server, timeout_s: float, reuse: bool) -> None:
        self.server, self.timeout_s, self.reuse = server, timeout_s, reuse
        self._idle: list[MCPClient] = []
        self._lock = threading.Lock()
        if reuse:
            atexit.register(self.close_idle)

    def take(self) -> MCPClient:
        """An idle connection, or a new one.

        Raises:
            ConnectionError: If a new connection cannot be made.
        """
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return MCPClient(self.server, self.timeout_s)

    def give_back(self, client: MCPClient) -> None:
        """Keep ``client`` for later (with ``reuse``) or close it."""
        if not self.reuse:
            client.close()
            return
        with self._lock:
            self._idle.append(client)

    def close_idle(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for client in idle:
            client.close()


def _caller(client: MCPClient, name: str) -> Callable[..., str]:
    def call(**arguments: Any) -> str:
        return client.call(name, arguments)

    return call
