"""The parts of OpenEnv's client the OpenEnv integration (:mod:`ratchet.integrations.openenv`) uses.

Sessions use OpenEnv's ``GenericEnvClient`` synchronously. It raises the server's error frames
as ``RuntimeError("Server error: <message> (code: <CODE>)")``; :func:`refusal` reads the code
back, and :func:`capacity_of` the size a full server states in its refusal.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from typing import Any

from ratchet.core.env import format_result
from ratchet.core.tool import ToolError

_SERVER_ERROR = re.compile(r"Server error: (?P<message>.*) \(code: (?P<code>\w+)\)\s*$", re.S)
_CAPACITY = re.compile(r"(\d+)/(\d+) sessions active")
ACTION_ERRORS = ("EXECUTION_ERROR", "VALIDATION_ERROR")
"""Error frames that are the action's fault (the agent sees them); any other is the server's."""


def connect(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> Any:
    """OpenEnv's generic client for one session on ``url``, used synchronously.

    It connects on its first message (the reset), sending ``headers`` (an API key, say).
    """
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient(
        base_url=url,
        connect_timeout_s=timeout_s,
        message_timeout_s=timeout_s,
        headers=headers or None,
    ).sync()


def close(client: Any) -> None:
    """Close a client's session; a server already gone has nothing left to release."""
    with contextlib.suppress(Exception):
        client.close()


def refusal(exc: Exception) -> tuple[str | None, str]:
    """The code and message of an error frame the client raised, else ``(None, text)``."""
    found = _SERVER_ERROR.match(str(exc)) if isinstance(exc, RuntimeError) else None
    if found is None:
        return None, str(exc)
    return found["code"], found["message"]


def capacity_of(message: str) -> int | None:
    """How many sessions a full server holds, from its refusal (``None`` if it does not say)."""
    found = _CAPACITY.search(message)
    return None if found is None else max(1, int(found[2]))


def tool_result_text(result: Any) -> str:
    """The text of a tool's result as the agent reads it.

    An MCP ``CallToolResult`` (as OpenEnv's MCP environments return it, in either spelling)
    gives the text of its text content, one item a line, other content named by its type;
    one marked as an error raises ``ToolError`` with that text. Any other value is shown as a
    tool's return value is (text as it is, else JSON).

    Raises:
        ToolError: If the result is an MCP error result.
    """
    if not (isinstance(result, dict) and isinstance(result.get("content"), list)):
        return format_result(result)
    parts = [
        str(item.get("text", "")) if item.get("type") == "text" else f"[{item.get('type')} content]"
        for item in result["content"]
        if isinstance(item, dict)
    ]
    text = "\n".join(parts)
    if result.get("is_error") or result.get("isError"):
        raise ToolError(text or "the tool failed")
    return text


class Slots:
    """The sessions this process holds on one server, at most ``limit`` (``None``: no bound).

    Args:
        limit: The most sessions to hold at once, if known.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._held = 0
        self._free = threading.Condition()

    def take(self, deadline: float) -> bool:
        """Take a slot, waiting until ``deadline`` (monotonic) for one; whether one was taken."""
        with self._free:
            while self.limit is not None and self._held >= self.limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._free.wait(left)
            self._held += 1
            return True

    def give_back(self) -> None:
        """Free a slot for the next waiting session."""
        with self._free:
            self._held -= 1
            self._free.notify()

    def bound(self, limit: int) -> None:
        """Hold at most ``limit`` sessions from now on."""
        with self._free:
            self.limit = limit if self.limit is None else min(self.limit, limit)
