"""Reply bodies in OpenAI's shapes, each checked against the ``openai`` package's own types.

A reply is a ``chat.completion`` body, or for ``stream: true`` the same reply as server-sent
``chat.completion.chunk`` events: the role, then the content (or a tool call's name, then its
arguments in pieces, as OpenAI streams ``tool_calls`` deltas), then the finish reason, an
optional usage chunk and ``data: [DONE]``. The reply is generated whole before its first chunk
is sent: streaming here changes the wire format, not the time to the first token. Ratchet adds
one field, ``conversation_id``, which clients that do not know it ignore.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from openai.types import Model as OpenAIModelEntry
from openai.types.chat import ChatCompletion, ChatCompletionChunk

import ratchet.engine.models.metadata as keys
from ratchet.core.tool import ToolCall
from ratchet.engine.models.base import Completion

FinishReason = Literal["stop", "length", "tool_calls"]
ARGUMENT_PIECE = 8
"""Characters of a tool call's arguments per streamed delta."""


@dataclass(frozen=True)
class Reply:
    """One generated reply, ready to send.

    Attributes:
        model: The model id that answered.
        message: The assistant message (content, or one tool call).
        finish_reason: Why generation ended.
        completion: The backend's completion (after any stop sequence).
        conversation_id: The recorded conversation it belongs to.
        logprobs: The reply's tokens in OpenAI's ``logprobs.content`` shape, if asked for.
    """

    model: str
    message: dict[str, Any]
    finish_reason: FinishReason
    completion: Completion
    conversation_id: str
    logprobs: list[dict[str, Any]] | None = None

    def usage(self) -> dict[str, int]:
        """The token counts in OpenAI's ``usage`` shape."""
        read, written = self.completion.prompt_tokens, self.completion.completion_tokens
        return {"prompt_tokens": read, "completion_tokens": written, "total_tokens": read + written}


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


def stopped(completion: Completion, stop: Sequence[str]) -> Completion:
    """``completion`` ended before the first of the ``stop`` sequences, if its text has one.

    The tokens after the cut are dropped from the token record too, and from the counts.
    """
    found = [index for index in (completion.text.find(s) for s in stop) if index >= 0]
    if not found:
        return completion
    cut = min(found)
    metadata = dict(completion.metadata, finish_reason="stop")
    shown = metadata.get(keys.LOGPROBS)
    kept = completion.completion_tokens
    if shown is not None:
        starts = _starts([entry["token"] for entry in shown])
        kept = sum(start < cut for start in starts) or (1 if cut else 0)
        metadata[keys.LOGPROBS] = shown[:kept]
        for key in (keys.COMPLETION_IDS, keys.TOKEN_LOGPROBS):
            if key in metadata:
                metadata[key] = metadata[key][:kept]
    return replace(
        completion, text=completion.text[:cut], completion_tokens=kept, metadata=metadata
    )


def _starts(pieces: Sequence[str]) -> list[int]:
    """Where each piece starts in their concatenation."""
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    return starts


def completion_body(reply: Reply) -> dict[str, Any]:
    """The ``chat.completion`` body."""
    body = {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": [
            {
                "index": 0,
                "message": reply.message,
                "finish_reason": reply.finish_reason,
                "logprobs": None if reply.logprobs is None else {"content": reply.logprobs},
            }
        ],
        "usage": reply.usage(),
        "conversation_id": reply.conversation_id,
    }
    checked: dict[str, Any] = ChatCompletion.model_validate(body).model_dump(
        mode="json", exclude_unset=True
    )
    return checked


def stream_events(reply: Reply, include_usage: bool) -> Iterator[str]:
    """The reply as server-sent ``chat.completion.chunk`` events, ending with ``[DONE]``."""
    head = {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": reply.model,
        "conversation_id": reply.conversation_id,
        **({"usage": None} if include_usage else {}),
    }

    def event(delta: dict[str, Any], **choice: Any) -> str:
        body = {**head, "choices": [{"index": 0, "delta": delta, **choice}]}
        return _event(ChatCompletionChunk.model_validate(body))

    for delta, logprobs in _deltas(reply):
        yield event(delta, logprobs=logprobs)
    yield event({}, finish_reason=reply.finish_reason)
    if include_usage:
        yield _event(
            ChatCompletionChunk.model_validate({**head, "choices": [], "usage": reply.usage()})
        )
    yield "data: [DONE]\n\n"


def _event(chunk: ChatCompletionChunk) -> str:
    return f"data: {json.dumps(chunk.model_dump(mode='json', exclude_unset=True))}\n\n"


def _deltas(reply: Reply) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """The message in pieces, each with its tokens' log-probabilities (if asked for)."""
    calls = reply.message.get("tool_calls")
    if calls:
        call = calls[0]
        function = call["function"]
        opening = {"index": 0, "id": call["id"], "type": "function"}
        opening["function"] = {"name": function["name"], "arguments": ""}
        tokens = {"content": reply.logprobs} if reply.logprobs is not None else None
        yield {"role": "assistant", "content": None, "tool_calls": [opening]}, tokens
        arguments = function["arguments"]
        for start in range(0, len(arguments), ARGUMENT_PIECE):
            piece = arguments[start : start + ARGUMENT_PIECE]
            yield {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, None
        return
    yield {"role": "assistant", "content": ""}, None
    content = str(reply.message.get("content") or "")
    entries = reply.logprobs
    if entries is not None and "".join(e["token"] for e in entries) == content:
        for entry in entries:  # one chunk per token, as OpenAI streams
            yield {"content": entry["token"]}, {"content": [entry]}
        return
    pieces = re.findall(r"\s*\S+\s*", content) or ([content] if content else [])
    for number, piece in enumerate(pieces):
        last = number == len(pieces) - 1
        tokens = {"content": entries} if last and entries is not None else None
        yield {"content": piece}, tokens


def model_entry(
    name: str, created: int, root: str | None, parent: str | None, prompt_format: str | None
) -> dict[str, Any]:
    """A ``/v1/models`` entry (OpenAI's, with vLLM's ``root`` and ``parent``)."""
    entry = OpenAIModelEntry.model_validate(
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "ratchet",
            "root": root,
            "parent": parent,
            **({"prompt_format": prompt_format} if prompt_format else {}),
        }
    )
    checked: dict[str, Any] = entry.model_dump(mode="json", exclude_unset=True)
    return checked
