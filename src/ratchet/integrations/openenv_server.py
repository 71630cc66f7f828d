"""Any Ratchet env as an OpenEnv environment server, so OpenEnv clients and trainers can use it.

:func:`openenv_app` returns OpenEnv's own FastAPI app (``create_app``) around the env: every
WebSocket session (``/ws``) is one Ratchet session. The env speaks OpenEnv's tool-calling
actions (RFC 003): ``{"type": "list_tools"}`` lists the session's tools (``finish`` included)
and ``{"type": "call_tool", "tool_name": ..., "arguments": {...}}`` calls one; an error the
agent should see (unknown tool, bad arguments, a tool's own error) comes back in the
observation's ``error``. When the episode ends the env's verifier judges the world and its
score is the observation's ``reward`` (``metadata`` carries ``passed`` and ``feedback``).

Tasks are served through OpenEnv's Task API: ``train``, ``validation`` (Ratchet's ``probe``)
and ``test``, up to ``tasks_per_split`` each (a generated env's splits have no end), each as
what the agent may see: its ``id``, its ``index`` and its instruction as ``prompt``. The task's
hidden params (a calc answer, the code env's hidden-test seed), family and difficulty stay on
the server; ``reset(split=..., index=...)`` starts one. With ``api_key``, every route but
``/health`` (the docs and the WebSocket sessions included) wants ``Authorization: Bearer KEY``,
checked before a request's body is read. Serve it with
``uvicorn.run(openenv_app(env, api_key=...), port=8000)``.
"""

from __future__ import annotations

import hmac
import json
import threading
from typing import TYPE_CHECKING, Any

from ratchet.core.env import Env, Session, draw_up_to, thread_safe_of
from ratchet.core.task import Split, Task
from ratchet.core.tool import ToolCall
from ratchet.engine.guard import guarded

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Receive, Scope, Send

SPLIT_NAMES: dict[str, Split] = {"train": "train", "validation": "probe", "test": "test"}
"""The OpenEnv split names served, and the Ratchet split behind each."""


def openenv_app(
    env: Env,
    *,
    tasks_per_split: int = 100,
    max_concurrent_envs: int = 16,
    seed: int = 0,
    api_key: str | None = None,
) -> FastAPI:
    """Return an OpenEnv server app for ``env``.

    Args:
        env: The env to serve.
        tasks_per_split: Most tasks listed per split by the Task API.
        max_concurrent_envs: WebSocket sessions at once (1 if the env is not thread safe).
        seed: Seed of the task lists.
        api_key: The key clients must send as ``Authorization: Bearer KEY`` on every route
            but ``/health``; ``None`` serves anyone who can reach the port.
    """
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

    catalog = _Catalog(guarded(env), tasks_per_split, seed)
    environment = _environment_class(catalog)
    concurrent = max_concurrent_envs if thread_safe_of(env) else 1
    app: FastAPI = create_app(
        environment,
        CallToolAction,
        CallToolObservation,
        env_name=server_name(env),
        max_concurrent_envs=concurrent,
    )
    if api_key is not None:
        app.add_middleware(KeyGate, key=api_key)
    return app


class KeyGate:
    """ASGI middleware: every HTTP and WebSocket request but ``/health`` must carry the key.

    It looks only at the headers, so a request without the key is refused (HTTP 401, or the
    WebSocket closed before it is accepted) before anything reads its body.

    Args:
        app: The app behind the gate.
        key: The key, sent as ``Authorization: Bearer KEY``.
    """

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self._expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on if it carries the key (or asks for ``/health``)."""
        if scope["type"] not in ("http", "websocket") or scope["path"] == "/health":
            await self.app(scope, receive, send)
            return
        sent = dict(scope["headers"]).get(b"authorization", b"")
        if hmac.compare_digest(sent, self._expected):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "missing or wrong key: send Authorization: Bearer KEY"})
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body.encode()})


def server_name(env: Env) -> str:
    """The name the env is served under (safe in a URL path: ``example/kv`` is ``example-kv``)."""
    return env.name.replace("/", "-")


class _Catalog:
    """The tasks served per split, drawn once and shared by every session."""

    def __init__(self, env: Env, size: int, seed: int) -> None:
        self.env, self.size, self.seed = env, size, seed
        self._lists: dict[str, list[Task]] = {}
        self._lock = threading.Lock()

    def tasks(self, split: str) -> list[Task]:
        if split not in SPLIT_NAMES:
            raise IndexError(f"unknown split {split!r}; served: {', '.join(SPLIT_NAMES)}")
        with self._lock:
            if split not in self._lists:
                self._lists[split] = draw_up_to(self.env, SPLIT_NAMES[split], self.size, self.seed)
            return self._lists[split]

    def spec(self, split: str, index: int) -> dict[str, Any]:
        """What a client may know of a task: what its agent will see, and how to start it."""
        task = self.tasks(split)[index]
        return {"id": task.id, "index": index, "prompt": task.instruction}


def _environment_class(catalog: _Catalog) -> Any:
    """An OpenEnv ``Environment`` subclass whose instances play ``catalog``'s env."""
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.mcp_types import (
        CallToolAction,
        CallToolObservation,
        ListToolsObservation,
        ToolError,
        ToolErrorType,
    )
    from openenv.core.env_server.mcp_types import Tool as OpenEnvTool
    from openenv.core.env_server.types import Observation, State
    from pydantic import Field

    class TaskObservation(Observation):  # type: ignore[misc]
        """The task text (and the world's first observation) on reset."""

        text: str = Field(default="", description="What the agent is told")

    class RatchetEnvironment(Environment):  # type: ignore[misc]
        SUPPORTS_CONCURRENT_SESSIONS = True  # each instance holds its own Ratchet session

        def __init__(self) -> None:
            super().__init__()
            self._session: Session | None = None
            self._tools: tuple[dict[str, Any], ...] = ()
            self._state = State(step_count=0)

        def reset(
            self,
            seed: int | None = None,
            episode_id: str | None = None,
            split: str = "train",
            index: int = 0,
            **kwargs: Any,
        ) -> TaskObservation:
            self.close()
            task = catalog.tasks(split)[index]
            self._session = catalog.env.session(task)
            first = self._session.reset()
            self._tools = first.tools
            self._state = State(episode_id=episode_id or task.id, step_count=0, task_id=task.id)
            return TaskObservation(text=first.text, reward=None)

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            tools = [
                OpenEnvTool(
                    name=t["function"]["name"],
                    description=t["function"]["description"],
                    input_schema=t["function"]["parameters"],
                )
                for t in self._tools
            ]
            if not isinstance(action, CallToolAction):
                return ListToolsObservation(tools=tools)
            if self._session is None:
                raise RuntimeError("reset the environment before calling its tools")
            self._state.step_count += 1
            seen = self._session.step(ToolCall(action.tool_name, dict(action.arguments)))
            error = None
            if seen.error is not None:
                kind = (
                    ToolErrorType.TOOL_NOT_FOUND
                    if seen.error.startswith("unknown tool")
                    else ToolErrorType.INVALID_ARGS
                    if seen.error.startswith("bad arguments")
                    else ToolErrorType.EXECUTION_ERROR
                )
                error = ToolError(error_type=kind, message=seen.error)
            reward, metadata = None, {}
            if seen.done and seen.error is None:
                verdict = self._session.verify()
                reward, metadata = (
                    verdict.score,
                    {"passed": verdict.passed, "feedback": verdict.feedback},
                )
            return CallToolObservation(
                tool_name=action.tool_name,
                result=seen.text,
                error=error,
                done=seen.done,
                reward=reward,
                metadata=metadata,
            )

        @property
        def state(self) -> Any:
            return self._state

        def close(self) -> None:
            if self._session is not None:
                self._session.close()
                self._session = None

        def list_splits(self) -> list[str]:
            return list(SPLIT_NAMES)

        def list_tasks(self, split: str) -> list[dict[str, Any]]:
            return [catalog.spec(split, i) for i in range(len(catalog.tasks(split)))]

        def num_tasks(self, split: str) -> int:
            return len(catalog.tasks(split))

        def get_task(self, split: str, index: int) -> dict[str, Any]:
            return catalog.spec(split, index)

    return RatchetEnvironment
