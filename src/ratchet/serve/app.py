"""The HTTP layer of ``ratchet serve``: a FastAPI app over the agent's backend.

Routes: ``GET /v1/models`` and ``/v1/models/{model}``, ``POST /v1/chat/completions`` (tools,
``tool_calls``, streaming), ``POST /v1/feedback``, vLLM's ``POST /v1/load_lora_adapter`` and
``/v1/unload_lora_adapter``, ``GET /metrics`` and ``GET /health`` (the one route open without
the key). In front of them, :class:`~ratchet.serve.guard.Guard` checks the key and caps the
body before anything is parsed, and :class:`~ratchet.serve.metrics.Counted` counts. A chat
request's generation runs on a worker thread (so concurrent requests reach the batcher
together) while the handler watches the client: a client that disconnects, or a server told
to stop (:class:`Uvicorn`), abandons the generation, which the backend then stops.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Annotated, Any, TypeVar

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

import ratchet.engine.models.metadata as keys
from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.engine.cancel import Abandoned, GenerationAbandoned
from ratchet.engine.harness import parse_action
from ratchet.engine.models.base import Completion, ModelError, Prompt, Sampling
from ratchet.serve.config import ServeConfig
from ratchet.serve.conversations import ServedMemory
from ratchet.serve.guard import Guard, client_of
from ratchet.serve.metrics import CONTENT_TYPE, Counted, Metrics
from ratchet.serve.models import Served as ServedModel
from ratchet.serve.models import ServedModels
from ratchet.serve.protocol import (
    ApiError,
    ChatRequest,
    FeedbackRequest,
    LoadAdapterRequest,
    UnloadAdapterRequest,
    parse_chat,
    parse_json,
)
from ratchet.serve.recorder import ConversationConflict, Recorder, Turn, UnknownConversation
from ratchet.serve.replies import Reply, completion_body, reply_message, stopped, stream_events

CONVERSATION_HEADER = "X-Ratchet-Conversation"
WATCH_S = 0.2
"""How often a handler looks whether its client is still there while the reply generates."""

T = TypeVar("T")


@dataclass(frozen=True)
class Server:
    """What the routes serve.

    Attributes:
        agent: The served agent (its temperature is the default one).
        models: The base model and loadable adapters.
        memory: Applies the agent's memory to incoming conversations.
        recorder: Records conversations and verdicts; closed when the app shuts down.
        config: The server's settings.
        api_keys: The keys clients must send as ``Authorization: Bearer KEY`` (none: no key).
        metrics: The server's counters (``/metrics``).
        stopping: Set when the server is told to stop: generations in flight are abandoned.
    """

    agent: Agent
    models: ServedModels
    memory: ServedMemory
    recorder: Recorder
    config: ServeConfig
    api_keys: tuple[str, ...] = ()
    metrics: Metrics = field(default_factory=Metrics)
    stopping: threading.Event = field(default_factory=threading.Event)


def create_app(server: Server) -> FastAPI:
    """Return the server app (no docs routes: ``/docs``, ``/redoc``, ``/openapi.json`` are off)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        server.recorder.close()

    app = FastAPI(
        title="ratchet serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.server = server
    app.include_router(routes)
    _error_handlers(app)
    app.add_middleware(Guard, keys=server.api_keys, max_body_bytes=server.config.max_body_bytes)
    app.add_middleware(Counted, metrics=server.metrics)
    return app


class Uvicorn(uvicorn.Server):
    """uvicorn's server, which on SIGTERM or SIGINT also abandons the generations in flight.

    uvicorn waits for open requests before it stops; a long generation would hold it up, so
    the signal sets :attr:`Server.stopping` first and each such request ends with a ``503``.

    Args:
        config: uvicorn's settings.
        server: The served agent's server.
    """

    def __init__(self, config: uvicorn.Config, server: Server) -> None:
        super().__init__(config)
        self.served = server

    def handle_exit(self, sig: int, frame: Any) -> None:
        """Abandon what is generating, then stop as uvicorn does."""
        self.served.stopping.set()
        super().handle_exit(sig, frame)


def _server(request: Request) -> Server:
    served: Server = request.app.state.server
    return served


ServerDep = Annotated[Server, Depends(_server)]
routes = APIRouter()


@routes.get("/health")
def health() -> dict[str, str]:
    """Liveness (open without the key)."""
    return {"status": "ok"}


@routes.get("/metrics")
def metrics(server: ServerDep) -> Response:
    """The server's counters in Prometheus' text format."""
    return Response(server.metrics.text(), media_type=CONTENT_TYPE)


@routes.get("/v1/models")
def list_models(server: ServerDep) -> dict[str, Any]:
    """The models on offer."""
    return {"object": "list", "data": server.models.listing()}


@routes.get("/v1/models/{model:path}")
def retrieve_model(model: str, server: ServerDep) -> dict[str, Any]:
    """One model on offer."""
    return server.models.entry(model)


@routes.post("/v1/chat/completions")
async def chat(http: Request, server: ServerDep) -> Response:
    """One reply, with the agent's memory applied; the conversation is recorded."""
    request = parse_chat(parse_json(await http.body()))
    served = server.models.get(request.model)
    _check_honoured(request, served)
    owner = client_of(http.scope)
    named = http.headers.get(CONVERSATION_HEADER) or request.conversation_id
    conversation_id = await run_in_threadpool(_conversation_id, server, request, named, owner)
    gone = threading.Event()

    def abandoned() -> bool:
        return gone.is_set() or server.stopping.is_set()

    work = partial(_answer, server, served, request, conversation_id, owner, abandoned)
    server.metrics.queue_depth.inc()
    try:
        reply = await _watching(http, gone, work)
    except GenerationAbandoned:
        if server.stopping.is_set():
            raise ApiError(503, "the server is shutting down", kind="server_error") from None
        return Response(status_code=499)  # nobody is left to read it
    finally:
        server.metrics.queue_depth.dec()
    headers = {CONVERSATION_HEADER: conversation_id}
    if request.stream:
        events = stream_events(reply, request.include_usage)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)
    return JSONResponse(completion_body(reply), headers=headers)


@routes.post("/v1/feedback")
def feedback(request: FeedbackRequest, http: Request, server: ServerDep) -> dict[str, Any]:
    """Attach a verdict to a recorded conversation (once; the same verdict again is a no-op)."""
    passed = request.score >= 1.0 if request.passed is None else request.passed
    try:
        recorded = server.recorder.feedback(
            request.conversation_id, request.score, passed, request.note, client_of(http.scope)
        )
    except UnknownConversation as exc:
        raise ApiError(404, str(exc), param="conversation_id") from None
    except ConversationConflict as exc:
        raise ApiError(409, str(exc), param="conversation_id", code="conflict") from None
    except ValueError as exc:
        raise ApiError(400, str(exc), param="conversation_id") from None
    assert recorded.verdict is not None
    return {
        "conversation_id": request.conversation_id,
        "passed": recorded.verdict.passed,
        "score": recorded.verdict.score,
        "turns": len(recorded.steps),
    }


@routes.post("/v1/load_lora_adapter")
def load_adapter(request: LoadAdapterRequest, server: ServerDep) -> PlainTextResponse:
    """Serve a LoRA adapter under its own model name (vLLM's endpoint)."""
    server.models.load(request.lora_name, request.lora_path, request.load_inplace)
    return PlainTextResponse(f"Success: LoRA adapter '{request.lora_name}' added successfully.")


@routes.post("/v1/unload_lora_adapter")
def unload_adapter(request: UnloadAdapterRequest, server: ServerDep) -> PlainTextResponse:
    """Stop serving a LoRA adapter (vLLM's endpoint)."""
    server.models.unload(request.lora_name)
    return PlainTextResponse(f"Success: LoRA adapter '{request.lora_name}' removed successfully.")


def _check_honoured(request: ChatRequest, served: ServedModel) -> None:
    """Refuse what this backend cannot do for the request, rather than ignore it."""
    offered: frozenset[str] = getattr(served.model, "sampling_options", frozenset())
    missing = sorted(request.options() - offered)
    if missing:
        fields = {"top_p": "top_p", "top_logprobs": "logprobs", "reply_schema": "response_format"}
        raise ApiError(
            400,
            f"{fields[missing[0]]} is not supported with model {served.model.name}",
            param=fields[missing[0]],
        )
    if request.stop and request.decoding_tools():
        raise ApiError(
            400,
            "stop applies to text replies, and with tools on offer every reply is one whole "
            "tool call: drop stop, or send tool_choice none",
            param="stop",
        )


def _conversation_id(server: Server, request: ChatRequest, named: str | None, owner: str) -> str:
    try:
        return server.recorder.conversation_id(request.messages, named, owner)
    except ValueError as exc:
        raise ApiError(400, str(exc), param="conversation_id") from None
    except ConversationConflict as exc:
        raise ApiError(409, str(exc), param="conversation_id", code="conflict") from None


async def _watching(http: Request, gone: threading.Event, work: Callable[[], T]) -> T:
    """Run ``work`` on a worker thread; set ``gone`` if the client disconnects meanwhile."""
    task = asyncio.ensure_future(run_in_threadpool(work))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=WATCH_S)
            if done:
                return task.result()
            if not gone.is_set() and await http.is_disconnected():
                gone.set()
    except asyncio.CancelledError:
        gone.set()
        raise


def _answer(
    server: Server,
    served: ServedModel,
    request: ChatRequest,
    conversation_id: str,
    owner: str,
    abandoned: Abandoned,
) -> Reply:
    """Generate the reply and record it (on a worker thread)."""
    messages = [_normalised(m) for m in request.messages]
    tools = request.decoding_tools()
    conversation = server.memory.conversation(messages)
    sampling = Sampling(
        server.agent.temperature if request.temperature is None else request.temperature,
        request.max_tokens or server.config.max_tokens,
        request.seed,
        top_p=request.top_p,
        top_logprobs=request.top_logprobs,
        reply_schema=None if tools else request.reply_schema,
    )
    # The request's seed rides on the prompt: the server batches it with other requests.
    prompt = replace(server.memory.prompt(conversation, tools), seed=request.seed)
    completion = _complete(server.models, served, prompt, sampling, abandoned)
    if request.stop:
        completion = stopped(completion, request.stop)
    message, finish = reply_message(completion, _call(completion, tools))
    turn = Turn(
        request.messages,
        conversation,
        request.tools,
        message,
        completion,
        served.name,
        served.model.name,
        request.recorded,
    )
    try:
        server.recorder.record(conversation_id, turn, owner)
    except ConversationConflict as exc:
        raise ApiError(409, str(exc), param="conversation_id", code="conflict") from None
    server.metrics.tokens(served.name, completion.prompt_tokens, completion.completion_tokens)
    logprobs = completion.metadata.get(keys.LOGPROBS) if request.logprobs else None
    return Reply(served.name, message, finish, completion, conversation_id, logprobs)


def _normalised(message: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's newer ``developer`` role is a system message to every chat template here."""
    return {**message, "role": "system"} if message.get("role") == "developer" else message


def _complete(
    models: ServedModels,
    served: ServedModel,
    prompt: Prompt,
    sampling: Sampling,
    abandoned: Abandoned,
) -> Completion:
    try:
        completion = models.complete(served, prompt, sampling, abandoned)
    except ModelError as exc:
        raise ApiError(503, f"the model is unavailable: {exc}", kind="server_error") from None
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    if abandoned():
        raise GenerationAbandoned("the client went away during generation")
    if completion.error is not None:
        if completion.metadata.get(keys.REFUSED):
            raise ApiError(400, completion.error)
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

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        error = ApiError(500, f"internal error: {type(exc).__name__}", kind="server_error")
        return JSONResponse(error.body(), 500)
