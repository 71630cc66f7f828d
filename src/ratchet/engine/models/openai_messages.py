"""The OpenAI chat wire format: reading ``tool_calls``, and tools as text for servers without them.

Servers that reject native tools get the conversation rewritten as plain text
(:func:`text_messages`): tool schemas and the expected JSON reply go into the system message,
assistant tool calls become their JSON text and tool results become user messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ratchet.core.tool import ToolCall


def parse_tool_calls(raw_calls: Any) -> tuple[tuple[ToolCall, ...], str]:
    """Turn OpenAI ``tool_calls`` into ToolCalls.

    Args:
        raw_calls: The ``tool_calls`` field of an assistant message (a list, unless the
            server is broken).

    Returns:
        ``(calls, "")`` when every call decodes; otherwise ``((), raw)`` where ``raw`` shows
        each call as ``{"name": ..., "arguments": <raw arguments>}`` so the harness reports
        it as a malformed action.
    """
    if not isinstance(raw_calls, list):
        return (), json.dumps(raw_calls)
    calls: list[ToolCall] = []
    shown: list[str] = []
    malformed = False
    for index, raw in enumerate(raw_calls):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict):
            malformed = True
            shown.append(json.dumps(raw))
            continue
        name = str(function.get("name") or "")
        arguments = function.get("arguments")
        call_id = str(raw.get("id") or f"call_{index}")
        decoded: Any = arguments
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            decoded = {}
        elif isinstance(arguments, str):
            try:
                decoded = json.loads(arguments)
            except json.JSONDecodeError:
                decoded = None
        raw_arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        shown.append(f'{{"name": {json.dumps(name)}, "arguments": {raw_arguments}}}')
        if isinstance(decoded, dict) and name:
            calls.append(ToolCall(name, decoded, call_id))
        else:
            malformed = True
    if malformed:
        return (), "\n".join(shown)
    return tuple(calls), ""


def text_messages(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Rewrite a tool-calling conversation as plain text for servers without tool support.

    Tool schemas and the expected reply format go into the system message; assistant tool
    calls become their JSON text and tool results become user messages. Consecutive messages
    of one role are merged, since some chat templates insist that roles alternate.

    Args:
        messages: OpenAI chat-format messages, possibly with ``tool_calls`` and ``tool`` roles.
        tools: OpenAI-format tool schemas.

    Returns:
        Messages with only ``role`` and string ``content``.
    """
    names_by_id: dict[str, str] = {}
    plain: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role", "user")
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                names_by_id[str(call.get("id"))] = str(call.get("function", {}).get("name"))
            content = _assistant_text(message)
        elif role == "tool":
            tool_name = message.get("name") or names_by_id.get(str(message.get("tool_call_id")))
            role = "user"
            content = f"Result of {tool_name or 'the tool call'}:\n{_content(message)}"
        else:
            content = _content(message)
        if plain and plain[-1]["role"] == role and role != "system":
            plain[-1]["content"] += "\n\n" + content
        else:
            plain.append({"role": role, "content": content})
    instructions = tool_instructions(tools)
    if plain and plain[0]["role"] == "system":
        plain[0]["content"] = f"{plain[0]['content']}\n\n{instructions}".strip()
    else:
        plain.insert(0, {"role": "system", "content": instructions})
    return plain


def tool_instructions(tools: Sequence[dict[str, Any]]) -> str:
    """Describe tools and the JSON reply format in words, for the system message.

    Args:
        tools: OpenAI-format tool schemas.
    """
    lines = ["You can call these tools:"]
    for tool in tools:
        function = tool.get("function", tool)
        lines.append(f"- {function.get('name')}: {function.get('description', '')}".rstrip())
        lines.append(f"  arguments (JSON schema): {json.dumps(function.get('parameters', {}))}")
    lines.append(
        "Reply with exactly one tool call as a JSON object and nothing else, in the form "
        '{"name": "<tool name>", "arguments": {<arguments>}}'
    )
    return "\n".join(lines)


def _assistant_text(message: dict[str, Any]) -> str:
    content = _content(message)
    calls = message.get("tool_calls") or []
    rendered = []
    for call in calls:
        function = call.get("function", {})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                rendered.append(
                    f'{{"name": {json.dumps(function.get("name"))}, "arguments": {arguments}}}'
                )
                continue
        rendered.append(json.dumps({"name": function.get("name"), "arguments": arguments}))
    # In text mode the harness may already have stored the JSON call as the content.
    missing = [r for r in rendered if _squash(r) not in _squash(content)]
    return "\n".join(part for part in [content, *missing] if part)


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)
