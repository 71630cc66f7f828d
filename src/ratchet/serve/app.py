"""The HTTP layer of ``ratchet serve``: a FastAPI app over the agent's backend.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions`` (with ``tools`` and ``tool_calls``),
``POST /v1/feedback``, vLLM's ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``,
and ``GET /health``. Handlers are plain functions that FastAPI runs on its worker threads, so a
slow generation never blocks the event loop and concurrent requests reach the batcher together.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException

from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import parse_action
from ratchet.engine.models.base import Completion, ModelError, Prompt, Sampling
from ratchet.serve.config import ServeConfig
from ratchet.serve.memory import ServedMemory
from ratchet.serve.models import Served as ServedModel
from ratchet.serve.models import ServedModels
from ratchet.serve.protocol import (
    ApiError,
    ChatRequest,
    FeedbackRequest,
    LoadAdapterRequest,
    UnloadAdapterRequest,
    check_messages,
    completion_body,
    reply_message,
)
from ratchet.serve.recorder import Recorder, UnknownConversation

CONVERSATION_HEADER = "X-Ratchet-Conversation"


@dataclass(frozen=True)
class Server:
    """What the routes serve.

    Attributes:
        agent: The served agent (its temperature is the default one).
        models: The base model and loadable adapters.
        memory: Applies the agent's memory to incoming conversations.
        recorder: Records conversations and verdicts; closed when the app shuts down.
        config: The server's settings.
        api_key: The key clients must send as ``Authorization: Bearer KEY`` (``None``: none).
    """

    agent: Agent
    models: ServedModels
    memory: ServedMemory
    recorder: Recorder
    config: ServeConfig
    api_key: str | None = None


def create_app(server: Server) -> FastAPI:
    """Return the server app."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        server.recorder.close()

    app = FastAPI(title="ratchet serve", lifespan=lifespan, dependencies=[Depends(_authorize)])
    app.state.server = server
    app.include_router(routes)
    _error_handlers(app)
    return app


def _server(request: Request) -> Server:
    served: Server = request.app.state.server
    return served


ServerDep = Annotated[Server, Depends(_server)]
routes = APIRouter()


def _authorize(server: ServerDep, authorization: Annotated[str | None, Header()] = None) -> None:
    if server.api_key is None:
        return
    sent = (authorization or "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(sent.encode(), server.api_key.encode()):
        raise ApiError(
            401,
            "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
            kind="authentication_error",
            code="invalid_api_key",
        )


@routes.get("/health")
def health() -> dict[str, str]:
    """Liveness."""
    return {"status": "ok"}


@routes.get("/v1/models")
def list_models(server: ServerDep) -> dict[str, Any]:
    """The models on offer."""
    return {"object": "list", "data": server.models.listing()}


@routes.post("/v1/chat/completions")
def chat(
    request: ChatRequest,
    server: ServerDep,
    x_ratchet_conversation: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """One reply, with the agent's memory applied; the conversation is recorded."""
    served = server.models.get(request.model)
    _check(request)
    messages = [_normalised(m) for m in request.messages]
    offered = list(request.tools or [])
    tools = _decoding_tools(offered, request.tool_choice)
    try:
        named = x_ratchet_conversation or request.conversation_id
        conversation_id = server.recorder.conversation_id(messages, named)
    except ValueError as exc:
        raise ApiError(400, str(exc), param="conversation_id") from None
    conversation = server.memory.conversation(messages)
    sampling = Sampling(
        server.agent.temperature if request.temperature is None else request.temperature,
        request.max_tokens or request.max_completion_tokens or server.config.max_tokens,
        request.seed,
    )
    # The request's seed rides on the prompt: the server batches it with other requests.
    prompt = replace(server.memory.prompt(conversation, tools), seed=request.seed)
    completion = _complete(server.models, served, prompt, sampling)
    message, finish = reply_message(completion, _call(completion, tools))
    server.recorder.record(
        conversation_id, messages, conversation, offered, message, completion, served.name
    )
    body = completion_body(served.name, message, finish, completion, conversation_id)
    return JSONResponse(body, headers={CONVERSATION_HEADER: conversation_id})


@routes.post("/v1/feedback")
def feedback(request: FeedbackRequest, server: ServerDep) -> dict[str, Any]:
    """Attach a verdict to a recorded conversation."""
    passed = request.score >= 1.0 if request.passed is None else request.passed
    try:
        recorded = server.recorder.feedback(
            request.conversation_id, request.score, passed, request.note
        )
    except UnknownConversation as exc:
        raise ApiError(404, str(exc), param="conversation_id") from None
    except ValueError as exc:
        raise ApiError(400, str(exc), param="conversation_id") from None
    return {
        "conversation_id": request.conversation_id,
        "passed": recorded.passed,
        "score": recorded.score,
        "turns": len(recorded.steps),
    }


@routes.post("/v1/load_lora_adapter")
def load_adapter(request: LoadAdapterRequest, server: ServerDep) -> PlainTextResponse:
    """Serve a LoRA adapter under its own model name (vLLM's endpoint)."""
    try:
        server.models.load(request.lora_name, request.lora_path, request.load_inplace)
    except ModelError as exc:
        raise ApiError(400, str(exc), param="lora_path") from None
    return PlainTextResponse(f"Success: LoRA adapter '{request.lora_name}' added successfully.")


@routes.post("/v1/unload_lora_adapter")
def unload_adapter(request: UnloadAdapterRequest, server: ServerDep) -> PlainTextResponse:
    """Stop serving a LoRA adapter (vLLM's endpoint)."""
    server.models.unload(request.lora_name)
    return PlainTextResponse(f"Success: LoRA adapter '{request.lora_name}' removed successfully.")


def _check(request: ChatRequest) -> None:
    if request.stream:
        raise ApiError(400, "streaming is not supported: send stream=false", param="stream")
    if request.n != 1:
        raise ApiError(400, f"only n=1 is supported; got n={request.n}", param="n")
    check_messages(request.messages)
    for index, tool in enumerate(request.tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ApiError(
                400,
                f"tools[{index}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                param=f"tools[{index}]",
            )


def _normalised(message: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's newer ``developer`` role is a system message to every chat template here."""
    return {**message, "role": "system"} if message.get("role") == "developer" else message


def _decoding_tools(
    offered: Sequence[dict[str, Any]], choice: str | dict[str, Any] | None
) -> tuple[dict[str, Any], ...]:
    """The tools a reply must call: all of them, one (a named choice) or none (``none``).

    ``auto`` decodes like ``required``: an agent's every reply is one tool call.
    """
    if not offered or choice == "none":
        return ()
    if choice is None or choice in ("auto", "required"):
        return tuple(offered)
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        chosen = tuple(t for t in offered if t["function"]["name"] == name)
        if chosen:
            return chosen
        raise ApiError(
            400, f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
        )
    raise ApiError(
        400,
        f"tool_choice must be none, auto, required or a function; got {choice!r}",
        param="tool_choice",
    )


def _complete(
    models: ServedModels, served: ServedModel, prompt: Prompt, sampling: Sampling
) -> Completion:
    try:
        completion = models.complete(served, prompt, sampling)
    except ModelError as exc:
        raise ApiError(503, f"the model is unavailable: {exc}", kind="server_error") from None
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    if completion.error is not None:
        raise ApiError(502, f"the model failed: {completion.error}", kind="server_error")
    return completion


def _call(completion: Completion, tools: Sequence[dict[str, Any]]) -> ToolCall | None:
    """The tool call in the reply, if tools were offered and it calls one of them."""
    if not tools:
        return None
    action = parse_action(completion)
    names = {tool["function"]["name"] for tool in tools}
    return action if isinstance(action, ToolCall) and action.name in names else None


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
            problems.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
        first = exc.errors()[0].get("loc", ()) if exc.errors() else ()
        param = ".".join(str(p) for p in first if p != "body") or None
        return JSONResponse(ApiError(400, "; ".join(problems), param=param).body(), 400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(ApiError(exc.status_code, message).body(), exc.status_code)
