"""How the ``local`` backend turns a :class:`Prompt` into text, and a tool call into a reply.

Small chat templates (SmolLM2's among them) know nothing of tools, so the tools are described
in the system message and the model answers with one JSON object
``{"name": ..., "arguments": {...}}``. Earlier tool calls are shown as that same JSON text and
tool results as user messages (``Result of add: 7``). Fine-tuning renders its examples with the
same function, so what the model is trained on is exactly what it is later prompted with.
Rendering is deterministic: the same prompt always gives the same text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ratchet.core.tool import ToolCall
from ratchet.engine.models.base import Prompt

TOOL_INSTRUCTION = (
    'Answer with one JSON object: {"name": <tool name>, "arguments": {<argument>: <value>}}.'
)


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer that rendering needs."""

    eos_token: Any

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any:
        """Render messages with the model's chat template."""
        ...


Render = Callable[[ChatTokenizer, Prompt, bool], str]
"""``render(tokenizer, prompt, add_generation_prompt) -> text``: how a model is prompted."""


def format_call(call: ToolCall) -> str:
    """Return the assistant text for ``call``: the JSON the model is asked to produce."""
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def describe_schema(schema: dict[str, Any]) -> str:
    """Return a compact type for a JSON schema: ``number``, ``"a" | "b"``, ``array of string``."""
    if "enum" in schema:
        return " | ".join(json.dumps(value, ensure_ascii=False) for value in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(describe_schema(option) for option in schema[key])
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {describe_schema(schema['items'])}"
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if isinstance(kind, str) and kind != "object":
        return kind
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


def describe_tool(tool: dict[str, Any]) -> str:
    """Return one line for an OpenAI-format tool: ``name(a: number, b?: string): description``.

    A ``?`` marks an optional argument.

    Raises:
        ValueError: If the tool has no name.
    """
    function = tool.get("function", tool)
    if not function.get("name"):
        raise ValueError(f"tool schema without a name: {tool!r}")
    parameters = function.get("parameters") or {}
    required = set(parameters.get("required", ()))
    arguments = ", ".join(
        f"{name}{'' if name in required else '?'}: {describe_schema(schema)}"
        for name, schema in (parameters.get("properties") or {}).items()
    )
    description = " ".join(str(function.get("description") or "").split())
    line = f"{function['name']}({arguments})"
    return f"{line}: {description}" if description else line


def tools_text(tools: Sequence[dict[str, Any]]) -> str:
    """Return the system-message section that lists ``tools`` and asks for one JSON call."""
    lines = ["You can call these tools:", *(f"- {describe_tool(tool)}" for tool in tools)]
    return "\n".join([*lines, TOOL_INSTRUCTION])


def to_chat(prompt: Prompt) -> list[dict[str, str]]:
    """Return the prompt as plain ``role``/``content`` messages any chat template accepts.

    Tools go into the (first) system message; assistant tool calls become their JSON text;
    ``tool`` messages become user messages naming the tool whose result they carry.
    """
    names_by_id: dict[str, str] = {}
    chat: list[dict[str, str]] = []
    for message in prompt.messages:
        role = str(message.get("role", "user"))
        content = _text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            calls = [_call_from_openai(entry) for entry in message["tool_calls"]]
            names_by_id.update({call.id: call.name for call in calls})
            content = "\n".join(format_call(call) for call in calls)
        elif role == "tool":
            name = message.get("name") or names_by_id.get(str(message.get("tool_call_id")), "")
            role, content = "user", f"Result of {name}: {content}" if name else f"Result: {content}"
        chat.append({"role": role, "content": content})
    if prompt.tools:
        section = tools_text(prompt.tools)
        if chat and chat[0]["role"] == "system":
            chat[0] = {"role": "system", "content": f"{chat[0]['content']}\n\n{section}"}
        else:
            chat.insert(0, {"role": "system", "content": section})
    return chat


def render_prompt(
    tokenizer: ChatTokenizer, prompt: Prompt, add_generation_prompt: bool = True
) -> str:
    """Return the text the model reads for ``prompt``, ending with the assistant turn's opening.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template.
        prompt: The conversation and the tools on offer.
        add_generation_prompt: Open an assistant turn at the end (for generation).
    """
    text = tokenizer.apply_chat_template(
        to_chat(prompt), tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return str(text)


def render_native(
    tokenizer: ChatTokenizer, prompt: Prompt, add_generation_prompt: bool = True
) -> str:
    """Render ``prompt`` with the model's own chat template and native tools, as vLLM does.

    For training adapters of models served elsewhere: tool calls keep their structure (with
    their arguments as objects, which templates expect) and the tools go to the template.
    """
    messages = [_native(message) for message in prompt.messages]
    text = tokenizer.apply_chat_template(
        messages,
        tools=list(prompt.tools) or None,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
    )
    return str(text)


def _native(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return message
    native = []
    for entry in calls:
        call = _call_from_openai(entry)
        function = {"name": call.name, "arguments": call.arguments}
        native.append({"id": call.id, "type": "function", "function": function})
    return {**message, "tool_calls": native}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _call_from_openai(entry: dict[str, Any]) -> ToolCall:
    function = entry.get("function", entry)
    raw = function.get("arguments", {})
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError:
            arguments = raw
    else:
        arguments = raw
    return ToolCall(str(function.get("name", "")), arguments, str(entry.get("id", "call_0")))
