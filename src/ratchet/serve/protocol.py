"""The OpenAI-compatible wire format: request bodies (validated) and reply bodies.

Requests are pydantic models, so a malformed body gets a 400 naming the field; replies follow
the OpenAI chat completion shape, with the conversation id as an extra field (clients that do
not know it ignore it). Errors use OpenAI's ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ratchet.core.tool import ToolCall
from ratchet.engine.models.base import Completion

ROLES = ("system", "developer", "user", "assistant", "tool")


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions``: the fields this server reads (others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    n: int = 1
    stream: bool = False
    conversation_id: str | None = None


class FeedbackRequest(BaseModel):
    """``POST /v1/feedback``: a verdict on a recorded conversation."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str
    score: float = Field(ge=0, le=1)
    passed: bool | None = None
    note: str = ""


class LoadAdapterRequest(BaseModel):
    """``POST /v1/load_lora_adapter`` (vLLM's dynamic LoRA endpoint)."""

    model_config = ConfigDict(extra="ignore")

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False


class UnloadAdapterRequest(BaseModel):
    """``POST /v1/unload_lora_adapter`` (vLLM's dynamic LoRA endpoint)."""

    model_config = ConfigDict(extra="ignore")

    lora_name: str = Field(min_length=1)


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


FinishReason = Literal["stop", "length", "tool_calls"]


def reply_message(
    completion: Completion, call: ToolCall | None
) -> tuple[dict[str, Any], FinishReason]:
    """The assistant message for a completion (a tool call, if one was made) and its reason."""
    if call is not None:
        wire = {
            "id": f"call_{secrets.token_hex(6)}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [wire]}, "tool_calls"
    cut = completion.metadata.get("finish_reason") == "length"
    return {"role": "assistant", "content": completion.text}, "length" if cut else "stop"


def completion_body(
    model: str,
    message: dict[str, Any],
    finish_reason: FinishReason,
    completion: Completion,
    conversation_id: str,
) -> dict[str, Any]:
    """The ``chat.completion`` reply body."""
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "total_tokens": completion.prompt_tokens + completion.completion_tokens,
        },
        "conversation_id": conversation_id,
    }


def check_messages(messages: list[dict[str, Any]]) -> None:
    """Refuse messages without a known role or with content of the wrong type.

    Raises:
        ApiError: Naming the first bad message.
    """
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            raise ApiError(
                400,
                f"messages[{index}].role must be one of {', '.join(ROLES)}; got {role!r}",
                param=f"messages[{index}].role",
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise ApiError(
                400,
                f"messages[{index}].content must be a string or a list of parts",
                param=f"messages[{index}].content",
            )
