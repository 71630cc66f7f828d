"""What a chat request asks for, validated against the ``openai`` package's own request types.

A body is checked in three steps: it must be a JSON object with no field outside OpenAI's
``CompletionCreateParams`` (plus Ratchet's ``conversation_id``); it must validate against those
types (every message, tool and option of the right shape); and every field the server cannot
honour must be absent or at its no-op value. Each failure is a ``400`` in OpenAI's error shape
naming the field: nothing is silently ignored. Extra keys *inside* a message (the ``name`` some
clients put on tool messages) are let through: they set nothing.

What passes becomes a :class:`ChatRequest`, the plain record the server works from.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
import pydantic
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from pydantic import BaseModel, ConfigDict, Field

MAX_STOP = 4
MAX_TOP_LOGPROBS = 20
CONVERSATION_FIELD = "conversation_id"

_NO_OP: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "modalities": (None, ["text"]),
    "store": (None, True),
    "parallel_tool_calls": (None, True, False),  # one call per reply satisfies both
}
"""Fields the server accepts only at values that change nothing here."""

_HANDLED = {
    "model",
    "messages",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "logprobs",
    "top_logprobs",
    "response_format",
    "tools",
    "tool_choice",
    "metadata",
    "user",
    "safety_identifier",
    CONVERSATION_FIELD,
}
"""Fields the server honours (``metadata``, ``user``, ``safety_identifier``: recorded)."""

RECORDED = ("metadata", "user", "safety_identifier")
ROLES = ("system", "developer", "user", "assistant", "tool")

_FIELD = re.compile(r"^[a-z_]+$")
"""A field name; pydantic also lists a union's branches in a location (``ChatCompletion...``)."""


class ApiError(Exception):
    """An error answered in OpenAI's format.

    Args:
        status: HTTP status.
        message: What went wrong and what to do.
        kind: OpenAI's error ``type``.
        param: The request field at fault, if any.
        code: A short machine-readable code.
    """

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


ToolMode = Literal["none", "auto", "required"]


@dataclass(frozen=True)
class ChatRequest:
    """A validated ``POST /v1/chat/completions`` body.

    Attributes:
        model: The model id asked for.
        messages: The conversation, as sent.
        tools: The function tools offered, as sent.
        tool_mode: ``none`` (text), ``auto`` or ``required`` (one tool call either way: an
            agent's every reply acts).
        tool_names: The tools the reply may call (``None``: any offered).
        temperature: ``None``: the agent's own.
        top_p: Nucleus sampling mass.
        seed: Sampling seed.
        stop: Sequences that end a text reply (not included in it).
        max_tokens: Reply cap (``None``: the server's default).
        logprobs: Return each token's log-probability.
        top_logprobs: And this many alternatives per token.
        reply_schema: JSON schema a text reply must match (``response_format``).
        stream: Answer as server-sent events.
        include_usage: With ``stream``, end with a usage chunk.
        conversation_id: The conversation the client names, if any.
        recorded: What the client attached for the record (``metadata``, ``user``...).
    """

    model: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    tool_mode: ToolMode = "auto"
    tool_names: tuple[str, ...] | None = None
    temperature: float | None = None
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    reply_schema: dict[str, Any] | None = None
    stream: bool = False
    include_usage: bool = False
    conversation_id: str | None = None
    recorded: dict[str, Any] = field(default_factory=dict)

    def decoding_tools(self) -> tuple[dict[str, Any], ...]:
        """The tools a reply must call: the offered ones, narrowed; none for ``none``."""
        if self.tool_mode == "none":
            return ()
        if self.tool_names is None:
            return self.tools
        return tuple(t for t in self.tools if t["function"]["name"] in self.tool_names)

    def options(self) -> frozenset[str]:
        """The optional sampling features this request needs (see ``Sampling``)."""
        needed = {"top_p"} if self.top_p < 1 else set()
        if self.logprobs:
            needed.add("top_logprobs")
        if self.reply_schema is not None:
            needed.add("reply_schema")
        return frozenset(needed)


class _ChatBody(CompletionCreateParamsBase, total=False):
    stream: bool | None


_BODY = pydantic.TypeAdapter(_ChatBody)
_KNOWN = frozenset(typing.get_type_hints(_ChatBody)) | {CONVERSATION_FIELD}


def parse_chat(body: Any) -> ChatRequest:
    """Validate a decoded JSON body into a :class:`ChatRequest`.

    Raises:
        ApiError: 400 naming the first field at fault.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise ApiError(
            400, f"unknown field {unknown[0]!r}: not part of the OpenAI API", param=unknown[0]
        )
    fields = {k: v for k, v in body.items() if k != CONVERSATION_FIELD}
    try:
        checked = _materialised(_BODY.validate_python(fields))
    except pydantic.ValidationError as exc:
        raise _invalid(exc) from None
    for name, value in checked.items():
        if name not in _HANDLED and value not in _NO_OP.get(name, (None,)):
            raise ApiError(400, f"{name} is not supported by ratchet serve", param=name)
    return ChatRequest(
        model=checked["model"],
        messages=_messages(body["messages"]),
        **_tools(checked, body),
        **_sampling(checked),
        stream=bool(checked.get("stream")),
        include_usage=_include_usage(checked),
        conversation_id=_conversation(body),
        recorded={k: checked[k] for k in RECORDED if checked.get(k) is not None},
    )


def _messages(messages: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The (validated) messages, if every one is of a role and content read here."""
    if not messages:
        raise ApiError(400, "messages must hold at least one message", param="messages")
    for index, message in enumerate(messages):
        if message["role"] not in ROLES:
            refusal = f"messages[{index}].role must be one of {', '.join(ROLES)}"
            raise ApiError(400, refusal, param=f"messages[{index}].role")
        parts = message.get("content")
        unread = {p["type"] for p in parts} - {"text", "refusal"} if isinstance(parts, list) else ()
        if unread:
            refusal = f"messages[{index}] has {min(unread)} content: only text is read here"
            raise ApiError(400, refusal, param=f"messages[{index}].content")
    return tuple(messages)


def _materialised(value: Any, where: tuple[str | int, ...] = ()) -> Any:
    """``value`` with the lazily validated iterables of the openai types run through.

    Raises:
        ApiError: 400 for an item that does not validate, located from the top.
    """
    if isinstance(value, Mapping):
        return {key: _materialised(item, (*where, key)) for key, item in value.items()}
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items: list[Any] = []
        try:
            for item in value:
                items.append(_materialised(item, (*where, len(items))))
        except pydantic.ValidationError as exc:
            raise _invalid(exc, where) from None
        return items
    return value


def _invalid(exc: pydantic.ValidationError, where: tuple[str | int, ...] = ()) -> ApiError:
    """A 400 naming the first problems, located by field names and positions.

    A union (a message is one of six kinds) fails once per kind; the kinds whose ``role`` or
    ``type`` does not match are left out, and of the rest the one with the fewest problems
    is shown.
    """
    kinds: dict[str, list[Any]] = {}
    for error in exc.errors():
        loc = (*where, *error["loc"])
        kind = next((str(p) for p in loc if isinstance(p, str) and not _FIELD.match(p)), "")
        located = [str(p) for p in loc if isinstance(p, int) or _FIELD.match(str(p))]
        kinds.setdefault(kind, []).append((".".join(located), error))
    plain = kinds.pop("", [])
    wrong = {
        kind: [(at, e) for at, e in errors if e["type"] == "literal_error" and _discriminates(e)]
        for kind, errors in kinds.items()
    }
    matching = {kind: errors for kind, errors in kinds.items() if not wrong[kind]}
    problems: dict[str, str] = {}
    for located, error in [*plain, *min(matching.values(), key=len, default=[])]:
        problems.setdefault(located or "body", error["msg"])
    if kinds and not matching:  # no kind has that role (or type): name them all
        at = next(at for errors in wrong.values() for at, _ in errors)
        expected = [
            str(e.get("ctx", {}).get("expected")) for errors in wrong.values() for _, e in errors
        ]
        problems.setdefault(at, f"Input should be one of {', '.join(expected)}")
    first = next(iter(problems))
    shown = "; ".join(f"{at}: {message}" for at, message in list(problems.items())[:3])
    return ApiError(400, f"invalid request: {shown}", param=first)


def _discriminates(error: Any) -> bool:
    """Whether ``error`` is about the field that tells a union's kinds apart."""
    return bool(error["loc"]) and error["loc"][-1] in ("role", "type")


def _tools(checked: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    tools = body.get("tools") or []
    for index, tool in enumerate(checked.get("tools") or []):
        if tool.get("type") != "function":
            raise ApiError(400, "only function tools are supported", param=f"tools[{index}].type")
    names = [tool["function"]["name"] for tool in tools]
    choice = checked.get("tool_choice")
    mode: ToolMode = "auto"
    chosen: list[str] | None = None
    if isinstance(choice, str):
        mode = typing.cast(ToolMode, choice)
    elif isinstance(choice, dict) and choice.get("type") == "function":
        chosen = [choice["function"]["name"]]
    elif isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = choice["allowed_tools"]
        mode = allowed["mode"]
        chosen = [str((t.get("function") or {}).get("name")) for t in allowed["tools"]]
    elif choice is not None:
        raise ApiError(400, "only function tools can be chosen", param="tool_choice")
    if choice not in (None, "none") and not tools:
        raise ApiError(400, "tool_choice needs tools", param="tool_choice")
    missing = [name for name in chosen or () if name not in names]
    if missing:
        raise ApiError(
            400, f"tool_choice names {missing[0]!r}, which is not in tools", param="tool_choice"
        )
    return {
        "tools": tuple(tools),
        "tool_mode": mode,
        "tool_names": None if chosen is None else tuple(chosen),
    }


def _sampling(checked: dict[str, Any]) -> dict[str, Any]:
    temperature = checked.get("temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise ApiError(
            400, f"temperature must be in [0, 2]; got {temperature}", param="temperature"
        )
    top_p = checked.get("top_p")
    top_p = 1.0 if top_p is None else float(top_p)
    if not 0 < top_p <= 1:
        raise ApiError(400, f"top_p must be in (0, 1]; got {top_p}", param="top_p")
    cap = checked.get("max_completion_tokens")
    cap = checked.get("max_tokens") if cap is None else cap
    if cap is not None and cap < 1:
        raise ApiError(
            400, f"max_completion_tokens must be at least 1; got {cap}", param="max_tokens"
        )
    logprobs = bool(checked.get("logprobs"))
    top = checked.get("top_logprobs") or 0
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise ApiError(400, f"top_logprobs must be in 0..{MAX_TOP_LOGPROBS}", param="top_logprobs")
    if top and not logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    return {
        "temperature": temperature,
        "top_p": top_p,
        "seed": checked.get("seed"),
        "stop": _stop(checked.get("stop")),
        "max_tokens": cap,
        "logprobs": logprobs,
        "top_logprobs": top,
        "reply_schema": _reply_schema(checked.get("response_format")),
    }


def _stop(stop: str | list[str] | None) -> tuple[str, ...]:
    sequences = [stop] if isinstance(stop, str) else list(stop or [])
    if len(sequences) > MAX_STOP or not all(sequences):
        raise ApiError(400, f"stop takes up to {MAX_STOP} non-empty strings", param="stop")
    return tuple(sequences)


def _reply_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise ApiError(400, f"response_format {kind!r} is not supported", param="response_format")
    assert response_format is not None
    schema = response_format["json_schema"].get("schema") or {}
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        message = f"response_format.json_schema.schema is not a JSON schema: {exc.message}"
        raise ApiError(400, message, param="response_format") from None
    return dict(schema)


def _include_usage(checked: dict[str, Any]) -> bool:
    options = checked.get("stream_options") or {}
    if options and not checked.get("stream"):
        raise ApiError(400, "stream_options needs stream: true", param="stream_options")
    if options.get("include_obfuscation"):
        message = "stream obfuscation is not supported: set include_obfuscation to false"
        raise ApiError(400, message, param="stream_options")
    return bool(options.get("include_usage"))


def _conversation(body: dict[str, Any]) -> str | None:
    named = body.get(CONVERSATION_FIELD)
    if named is not None and not isinstance(named, str):
        raise ApiError(400, "conversation_id must be a string", param=CONVERSATION_FIELD)
    return named


def parse_json(raw: bytes) -> Any:
    """Decode a request body.

    Raises:
        ApiError: 400 if it is not UTF-8 JSON.
    """
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from None


class FeedbackRequest(BaseModel):
    """``POST /v1/feedback``: a verdict on a recorded conversation."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str
    score: float = Field(ge=0, le=1)
    passed: bool | None = None
    note: str = Field(default="", max_length=10_000)


class LoadAdapterRequest(BaseModel):
    """``POST /v1/load_lora_adapter`` (vLLM's dynamic LoRA endpoint)."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1, max_length=200)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False


class UnloadAdapterRequest(BaseModel):
    """``POST /v1/unload_lora_adapter`` (vLLM's dynamic LoRA endpoint)."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None
