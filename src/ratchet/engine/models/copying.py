"""Copy-constrained arguments: a reply whose free arguments must be copied from the conversation.

A small model that knows which tool to call still invents its arguments: asked about the
customer ``fatima.ahmed57@example.com``, the embedded 135M model looks up
``fandex.f.ahmed57.com.id.83702...@f.f``. Exploration can restrict every free string and
number argument to a span of the conversation so far (the task's words and phrases, and the
values the tools returned), leaving the choice of which span to the model; a success found
this way is still the model's own reply, word for word, and trains like any other.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from typing import Any

MAX_SPANS = 400
"""Most spans offered per reply (the grammar of an argument grows with them)."""
_MAX_SPAN_CHARS = 80
_EDGES = "()[]{}<>,.;:!?\"'`"
_PHRASE_BREAKS = re.compile(r"[,;()\[\]{}\n]|\. |: ")
_QUOTED = re.compile(r'"([^"\n]{1,80})"')


def conversation_spans(messages: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The spans an argument may copy: words, phrases and quoted values of the conversation.

    Read from the user's messages and the tools' results (not the system prompt, whose words
    are instructions, not data), in order of appearance, at most :data:`MAX_SPANS`. A word
    loses surrounding punctuation (``(fatima.ahmed57@example.com)`` gives the address); one
    starting with ``#`` is offered with and without it (order ``#W123`` is ``W123`` to a tool).
    A short message is a span as a whole too (``Identity confirmed: customer_id ana_li_1234``,
    which an agent may well report as it stands).
    """
    found: dict[str, None] = {}
    for message in messages:
        if message.get("role") not in ("user", "tool") or not isinstance(message["content"], str):
            continue
        text = message["content"]
        for span in _spans(text):
            if span and len(span) <= _MAX_SPAN_CHARS:
                found.setdefault(span)
    return tuple(found)[:MAX_SPANS]


def _spans(text: str) -> list[str]:
    """The spans of one message's text.

    The whole text, words, quoted values, phrases (text between commas, brackets and sentence
    ends), and each phrase's tails from a word that starts with a digit or a capital ("ship it
    to 608 Station Rd Apt 13" gives "608 Station Rd Apt 13"); the caller drops long ones.
    """
    words = [text.strip(), *(word.strip(_EDGES) for word in text.split())]
    words += [word[1:] for word in words if word.startswith("#")]
    phrases = [part.strip().strip(_EDGES) for part in _PHRASE_BREAKS.split(text)]
    tails = []
    for phrase in phrases:
        parts = phrase.split()
        tails += [
            " ".join(parts[i:])
            for i in range(1, len(parts) - 1)
            if parts[i][0].isdigit() or parts[i][0].isupper()
        ]
    return [*words, *_QUOTED.findall(text), *(p for p in phrases if " " in p), *tails]


def copy_only(tools: Sequence[dict[str, Any]], spans: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """``tools`` with every free string and number argument restricted to ``spans``.

    A property with an ``enum`` of its own keeps only the values the conversation mentions,
    if it mentions any (a name among every name a customer can have: the one in the request),
    else the whole enum; a ``const`` stays. Strings may be any span, integers and numbers any
    span that reads as one. Nested objects and arrays are restricted item by item. A property
    with no span of its type is left free.
    """
    strings = list(spans)
    numbers = [number for span in spans if (number := _number(span)) is not None]
    restricted = []
    for tool in tools:
        tool = copy.deepcopy(tool)
        function = tool.get("function", tool)
        if isinstance(function.get("parameters"), dict):
            _restrict(function["parameters"], strings, numbers)
        restricted.append(tool)
    return tuple(restricted)


def _restrict(schema: dict[str, Any], strings: list[str], numbers: list[int | float]) -> None:
    if "const" in schema:
        return
    if isinstance(schema.get("enum"), list):
        mentioned = [value for value in schema["enum"] if _mentioned(value, strings, numbers)]
        schema["enum"] = mentioned or schema["enum"]
        return
    kind = schema.get("type")
    if kind == "object":
        for child in (schema.get("properties") or {}).values():
            if isinstance(child, dict):
                _restrict(child, strings, numbers)
    elif kind == "array" and isinstance(schema.get("items"), dict):
        _restrict(schema["items"], strings, numbers)
    elif kind == "string" and strings:
        schema["enum"] = strings
    elif kind == "integer":
        whole = [n for n in numbers if isinstance(n, int)]
        if whole:
            schema["enum"] = whole
    elif kind == "number" and numbers:
        schema["enum"] = numbers


def _mentioned(value: object, strings: list[str], numbers: list[int | float]) -> bool:
    if isinstance(value, str):
        return value in strings
    if isinstance(value, int | float) and not isinstance(value, bool):
        return any(value == n and not isinstance(n, bool) for n in numbers)
    return False


def _number(span: str) -> int | float | None:
    """``span`` as a JSON number, if it is one (``"42"``, ``"-3.5"``; not ``"1e999"``)."""
    try:
        value = json.loads(span)
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if abs(value) < 1e15 else None
