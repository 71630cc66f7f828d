"""A synchronous client of one MCP server, over stdio or streamable HTTP.

:class:`MCPClient` connects to a server (a process it starts, :class:`StdioServer`, or a URL,
:class:`HttpServer`), lists its tools and calls them; :mod:`ratchet.integrations.mcp` makes
Ratchet tools and envs of them.

A stdio server is always reaped, whatever it does: it runs at the head of its own process group
under a small guard (:mod:`ratchet.integrations.stdio_guard`) that kills the group when the host
process ends, even by ``SIGKILL``; closing a client (or giving up on a server that never
finishes its start-up handshake) closes the server's input, waits ``grace_s``, sends the group
``SIGTERM``, waits ``grace_s`` again, and then kills the group.

The SDK is asynchronous; each client runs its own event loop on a background thread, so the
sessions stay plain synchronous objects on Ratchet's episode threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratchet.core.tool import ToolError

if TYPE_CHECKING:
    from mcp import ClientSession

_GUARD = str(Path(__file__).resolve().with_name("stdio_guard.py"))


@dataclass(frozen=True)
class StdioServer:
    """An MCP server the client starts as a process and talks to over stdin/stdout.

    Attributes:
        command: The program, e.g. ``sys.executable``.
        args: Its arguments, e.g. ``["my_server.py"]``.
        env: Extra environment variables for it.
        cwd: Its working directory.
        quiet: Discard what it writes to stderr (servers log every request there).
        grace_s: Seconds it gets to exit once its input is closed, and again after
            ``SIGTERM``, before its process group is killed.
    """

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    quiet: bool = True
    grace_s: float = 2.0


@dataclass(frozen=True)
class HttpServer:
    """An MCP server reached over streamable HTTP.

    Attributes:
        url: The MCP endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        headers: Sent with every request (authorisation, say).
    """

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


Server = StdioServer | HttpServer | str
"""An MCP server: a :class:`StdioServer`, an :class:`HttpServer`, or a URL."""


class MCPClient:
    """A synchronous connection to one MCP server.

    Args:
        server: Where the server is.
        timeout_s: Longest wait for connecting and for each tool call.

    Raises:
        ConnectionError: If the server cannot be started or reached, or fails to initialise.
    """

    def __init__(self, server: Server, timeout_s: float = 30.0) -> None:
        self.server = HttpServer(server) if isinstance(server, str) else server
        self.timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._done = threading.Event()
        self._group: int | None = None
        self._session: ClientSession | None = None
        ready: concurrent.futures.Future[list[dict[str, Any]]] = concurrent.futures.Future()
        self._main = asyncio.run_coroutine_threadsafe(self._hold(ready), self._loop)
        try:
            self.tools: list[dict[str, Any]] = ready.result(timeout_s)
        except Exception as exc:
            self.close()
            where = self.server.url if isinstance(self.server, HttpServer) else self.server.command
            raise ConnectionError(f"MCP server {where} failed to start: {_reason(exc)}") from None

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Call a tool and return its result as text.

        Raises:
            ToolError: If the server reports the call failed (``isError``), with its message.
        """
        if self._session is None:
            raise ToolError("the MCP connection is closed")
        request = self._session.call_tool(
            name, dict(arguments or {}), read_timeout_seconds=timedelta(seconds=self.timeout_s)
        )
        result = asyncio.run_coroutine_threadsafe(request, self._loop).result(self.timeout_s + 5)
        text = _text(result)
        if result.isError:
            raise ToolError(text or f"{name} failed")
        return text

    def close(self) -> None:
        """Close the session and reap the server process, whatever it does (idempotent).

        The task holding the connection is cancelled wherever it is (the handshake included),
        and the transport stops the server (see the module docstring); should that hang, the
        server's process group is killed from here.
        """
        if not self._thread.is_alive():
            return
        self._session = None
        self._main.cancel()
        grace = self.server.grace_s if isinstance(self.server, StdioServer) else 0.0
        if not self._done.wait(2 * grace + self.timeout_s) and self._group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._group, signal.SIGKILL)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.timeout_s)
        if not self._thread.is_alive():
            self._loop.close()

    async def _hold(self, ready: concurrent.futures.Future[list[dict[str, Any]]]) -> None:
        """Keep the transport and session open until :meth:`close` cancels this task."""
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await _list_tools(session)
                self._session = session
                ready.set_result(listed)
                await asyncio.Event().wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._done.set()

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        if isinstance(self.server, HttpServer):
            return _http_transport(self.server, stack)
        return _stdio_transport(self.server, stack, self._started)

    def _started(self, group: int) -> None:
        self._group = group


@contextlib.asynccontextmanager
async def _http_transport(server: HttpServer, stack: contextlib.AsyncExitStack) -> Any:
    """Yield ``(read, write)`` streams to a streamable HTTP server."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = await stack.enter_async_context(create_mcp_http_client(dict(server.headers)))
    async with streamable_http_client(server.url, http_client=http) as (read, write, _):
        yield read, write


@contextlib.asynccontextmanager
async def _stdio_transport(
    server: StdioServer, stack: contextlib.AsyncExitStack, started: Callable[[int], None]
) -> Any:
    """Start the server under its guard and yield ``(read, write)`` message streams.

    Newline-delimited JSON-RPC both ways, as the SDK's own stdio client; unlike it, the server
    is stopped in a shielded scope, so a cancelled connection (a handshake given up on) stops
    it too, and its whole process group is killed at the end.

    Raises:
        FileNotFoundError: If the server's command is not found.
    """
    import anyio
    from anyio.streams.text import TextReceiveStream
    from mcp import types
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    env = {**os.environ, **server.env} if server.env is not None else get_default_environment()
    if shutil.which(server.command, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(f"no program {server.command!r} on the server's PATH")
    # The stack closes the file when the connection closes.
    errlog = stack.enter_context(open(os.devnull, "w")) if server.quiet else sys.stderr  # noqa: SIM115
    guard = [sys.executable, "-I", "-S", _GUARD, str(os.getpid()), server.command]
    process = await anyio.open_process(
        [*guard, *server.args], env=env, stderr=errlog, cwd=server.cwd, start_new_session=True
    )
    started(process.pid)
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def server_to_session() -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with to_session:
                buffer = ""
                async for chunk in TextReceiveStream(stdout):
                    *lines, buffer = (buffer + chunk).split("\n")
                    for line in filter(str.strip, lines):
                        try:
                            message = types.JSONRPCMessage.model_validate_json(line)
                        except ValueError as exc:
                            await to_session.send(exc)
                            continue
                        await to_session.send(SessionMessage(message))

    async def session_to_server() -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with from_session:
                async for message in from_session:
                    text = message.message.model_dump_json(by_alias=True, exclude_none=True)
                    await stdin.send((text + "\n").encode())

    async with process, anyio.create_task_group() as pumps:
        pumps.start_soon(server_to_session)
        pumps.start_soon(session_to_server)
        try:
            yield read, write
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, server.grace_s)
            pumps.cancel_scope.cancel()


async def _stop(process: Any, grace_s: float) -> None:
    """Close the server's input, then ``SIGTERM`` and ``SIGKILL`` its group, ``grace_s`` apart."""
    import anyio

    with contextlib.suppress(Exception):  # already closed, or the server is gone
        await process.stdin.aclose()
    with anyio.move_on_after(grace_s):
        await process.wait()
    group = process.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if process.returncode is None:
            os.killpg(group, signal.SIGTERM)
            with anyio.move_on_after(grace_s):
                await process.wait()
        # Whatever is left of the group (the server's own children too) goes now.
        os.killpg(group, signal.SIGKILL)
    await process.wait()
    with anyio.move_on_after(max(grace_s, 1.0)):  # the kernel ends them as it gets to them
        while _group_lives(group):
            await anyio.sleep(0.02)


def _group_lives(group: int) -> bool:
    """Whether a process of ``group`` still runs (exited ones awaiting their parent do not)."""
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not os.path.isdir("/proc"):
        return True
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                fields = stat_file.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _list_tools(session: ClientSession) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(cursor)
        tools += [tool.model_dump(exclude_none=True) for tool in page.tools]
        cursor = page.nextCursor
        if not cursor:
            return tools


def _text(result: Any) -> str:
    """A tool result's content as text: text parts as they are, others named."""
    parts = []
    for item in result.content:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind == "resource" and hasattr(item.resource, "text"):
            parts.append(item.resource.text)
        else:
            parts.append(f"[{kind or 'content'} content]")
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, sort_keys=True))
    return "\n".join(parts)


def _reason(exc: BaseException) -> str:
    """The innermost message of an exception group (anyio wraps transport failures)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
