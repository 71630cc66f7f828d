"""Copy-constrained arguments: a reply whose free arguments must be copied from the conversation.

A small model that knows which tool to call still invents its arguments: asked about the
customer ``fatima.ahmed57@example.com``, the embedded 135M model looks up
``fandex.f.ahmed57.com.id.83702...@f.f``. Exploration can restrict every free string and
number argument to a span of the conversation so far (the task's words and phrases, and the
values the tools returned), leaving the choice of which span to the model; a success found
this way is still the model's own reply, word for word, and trains like any other.

Chaining goes one step further: at least one argument of the reply must be copied from the
latest tool result (:func:`result_spans`, :func:`chain_on`). A small model that learned one
call then ``finish`` and is made to go on tends to repeat its first call's arguments (after
``multiply(49, 8) -> 392`` it calls ``subtract(49, 8)``); a call that takes up what the last
one returned (``subtract(392, ...)``, the order listed, the room reached) is what every
multi-step plan is made of.

Spending values (:func:`uses_left`) closes the remaining gap: once a call has passed a value as
often as the conversation mentions it, it is no longer offered, so a model made to go on cannot pass
the first call's operands again (``multiply(392, 49)``) and chooses among the values it has not used
yet: in a chain of operations on given numbers, the next number. Spending holds within a call too:
a chained call that takes up a result left once does not pass it again in another argument
(``subtract(-23, -23)``, see :func:`chain_on`).
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from ratchet.improve.explore.joined import joined_pattern

MAX_SPANS = 400
"""Most spans offered per reply (the grammar of an argument grows with them)."""
MAX_ONCE_OPTIONS = 8
"""Most alternatives per tool that keep a value left once out of the other arguments."""
_MAX_SPAN_CHARS = 80
_EDGES = "()[]{}<>,.;:!?\"'`"
_PHRASE_BREAKS = re.compile(r"[,;()\[\]{}\n]|\. |: ")
_FIELD_BREAKS = re.compile(r"[,;:=|]")
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

    The whole text, words, the fields of a word that joins several (``3,Elif,Tunis,123`` in a
    CSV row, ``logs/app.log:7:`` in a search hit, ``port=8305``), quoted values, phrases (text
    between commas, brackets and sentence ends), and each phrase's tails from a word that starts
    with a digit or a capital ("ship it to 608 Station Rd Apt 13" gives "608 Station Rd Apt
    13"); the caller drops long ones.
    """
    words = [text.strip(), *(word.strip(_EDGES) for word in text.split())]
    words += [word[1:] for word in words if word.startswith("#")]
    words += [
        field.strip(_EDGES)
        for word in words[1:]
        if _FIELD_BREAKS.search(word)
        for field in _FIELD_BREAKS.split(word)
        if field.strip(_EDGES)
    ]
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


@dataclass(frozen=True)
class _Values:
    """What arguments may be copied from: spans, the numbers among them, and their text."""

    strings: list[str]
    numbers: list[int | float]
    text: str
    joins: int = 1

    @classmethod
    def of(cls, spans: Sequence[str], joins: int = 1) -> _Values:
        numbers = [number for span in spans if (number := _number(span)) is not None]
        return cls(list(spans), numbers, "\n".join(spans), joins)

    def mention(self, value: object) -> bool:
        """Whether ``value`` is one of the spans, or a string that occurs in one as words.

        Closed-set values are matched as words inside spans too: ``brass key`` is mentioned
        by "You pick up the brass key." though no span is exactly it.
        """
        if self.exactly(value):
            return True
        return (
            isinstance(value, str)
            and bool(value)
            and re.search(rf"(?<!\w){re.escape(value)}(?!\w)", self.text) is not None
        )

    def exactly(self, value: object) -> bool:
        """Whether ``value`` is one of the spans as it stands, or a number one of them reads as."""
        if isinstance(value, str):
            return value in self.strings
        return any(same_value(value, n) for n in self.numbers)


def copy_only(
    tools: Sequence[dict[str, Any]], spans: Sequence[str], joins: int = 1
) -> tuple[dict[str, Any], ...]:
    """``tools`` with every free string and number argument restricted to ``spans``.

    With ``joins`` above 1, a string without constraints of its own may also be up to that
    many spans joined by ``", "`` or a new line (:func:`joined_pattern`): the values a task
    asks to list or report together ("the values, in that order, separated by commas", one
    name per line), which no single span is.

    A property with an ``enum`` of its own keeps only the values the conversation mentions,
    if it mentions any (a name among every name a customer can have: the one in the request),
    else the whole enum; a ``const`` stays. Strings may be any span, integers and numbers any
    span that reads as one, within the property's own constraints (``pattern``, lengths,
    bounds). Nested objects and arrays are restricted item by item. A property with no span
    of its type is left free.

    A property whose constraints accept none of the spans of its type cannot be copied (an
    order id before any was mentioned): a tool that requires one is left out, and an optional
    one is dropped from its tool, since no copied call could fill it. When that leaves no tool
    (a reply made to call one drawn tool), the tools are offered with such properties free
    instead, so the reply can still be decoded.
    """
    values = _Values.of(spans, joins)
    copyable = [tool for tool in (_copied(t, values, strict=True) for t in tools) if tool]
    if copyable or not tools:
        return tuple(copyable)
    return tuple(tool for tool in (_copied(t, values, strict=False) for t in tools) if tool)


def _copied(tool: dict[str, Any], values: _Values, *, strict: bool) -> dict[str, Any] | None:
    """A copy of ``tool`` restricted to ``values``; ``None`` when it cannot be copied (strict)."""
    tool = copy.deepcopy(tool)
    function = tool.get("function", tool)
    parameters = function.get("parameters")
    if isinstance(parameters, dict) and not _restrict(parameters, values, strict):
        return None
    return tool


def result_spans(messages: Sequence[dict[str, Any]]) -> tuple[str, ...] | None:
    """The spans of the latest tool result, if the conversation ends with one that succeeded.

    ``None`` when the last message is not a tool result, or is an error (``Error: ...``): an
    error message names what went wrong, not something to act on.
    """
    if not messages or messages[-1].get("role") != "tool":
        return None
    text = messages[-1].get("content")
    if not isinstance(text, str) or text.startswith("Error:"):
        return None
    return conversation_spans(messages[-1:]) or None


def uses_left(messages: Sequence[dict[str, Any]], spent: Sequence[object]) -> dict[str, int]:
    """How often calls may still pass each span of ``messages`` (:func:`conversation_spans`).

    A span may be passed as often as the conversation mentions it, less the times the calls of
    ``spent`` (their argument values) passed it: strings as they are, numbers by value (``"8"``
    and ``8.0`` are one value). So a number the task gives twice can be passed twice, and a
    result equal to a value already passed is offered again: it is a new mention. Spans in
    conversation order; spent ones (none left) are left out.
    """
    texts = [
        m["content"]
        for m in messages
        if m.get("role") in ("user", "tool") and isinstance(m.get("content"), str)
    ]
    # Counter keys compare by value, so 8 and 8.0 count as one number.
    mentioned = Counter(
        n
        for text in texts
        for word in text.split()
        if (n := _number(word.strip(_EDGES))) is not None
    )
    passed = Counter(
        v for v in spent if isinstance(v, str | int | float) and not isinstance(v, bool)
    )

    def left(span: str) -> int:
        if (number := _number(span)) is not None:
            return max(mentioned[number], 1) - passed[number]
        pattern = rf"(?<!\w){re.escape(span)}(?!\w)"
        mentions = sum(len(re.findall(pattern, text)) for text in texts)
        return max(mentions, 1) - passed[span]

    return {span: n for span in conversation_spans(messages) if (n := left(span)) > 0}


def chain_on(
    tools: Sequence[dict[str, Any]], latest: Sequence[str], once: Sequence[str] = ()
) -> tuple[dict[str, Any], ...]:
    """``tools`` (already restricted by :func:`copy_only`) with one argument copied from ``latest``.

    Each tool's parameters become ``anyOf`` one alternative per top-level argument that can
    take a value of ``latest`` (an ``enum`` narrowed to the values ``latest`` mentions, and
    that argument required); which argument carries the result is the model's choice. A tool
    none of whose arguments can take one (no arguments, or none mentioned) is left out; when
    that leaves no tool, ``tools`` are returned as they are.

    A value of ``once`` (one a call may pass only once more, see :func:`uses_left`) gets an
    alternative of its own in which no other top-level argument may take it: a result given
    once is not passed as two operands (``subtract(-23, -23)``). At most
    :data:`MAX_ONCE_OPTIONS` such alternatives per tool; past that, the tool's values share
    alternatives as without ``once``.
    """
    values = _Values.of(latest)
    single = _Values.of(once)
    chained = []
    for tool in tools:
        function = tool.get("function", tool)
        parameters = function.get("parameters")
        if not isinstance(parameters, dict):
            continue
        options = _chain_options(parameters, values, single)
        if not options:
            continue
        tool = copy.deepcopy(tool)
        tool.get("function", tool)["parameters"] = (
            options[0] if len(options) == 1 else {"anyOf": options}
        )
        chained.append(tool)
    return tuple(chained) or tuple(tools)


def _chain_options(
    parameters: dict[str, Any], latest: _Values, once: _Values
) -> list[dict[str, Any]]:
    """Copies of ``parameters`` in which one argument takes a value of the latest result.

    An argument can when its values (an ``enum``, or a ``const``: a closed set of one) include
    one the result mentions. Its values left ``once`` each get a copy in which the other
    top-level arguments cannot take that value; its other values share one copy.
    """
    properties = parameters.get("properties") or {}
    takers: list[tuple[str, list[Any], list[Any]]] = []
    for name, child in properties.items():
        if not isinstance(child, dict):
            continue
        closed = closed_values(child)
        mentioned = [v for v in closed if latest.mention(v)] if closed is not None else []
        if mentioned:
            takers.append((name, mentioned, [v for v in mentioned if once.exactly(v)]))
    if sum(len(single) for _, _, single in takers) > MAX_ONCE_OPTIONS:
        takers = [(name, mentioned, []) for name, mentioned, _ in takers]
    options = []
    for name, mentioned, single in takers:
        shared = [v for v in mentioned if not any(same_value(v, s) for s in single)]
        if shared:
            options.append(_taking(parameters, name, shared))
        for value in single:
            option = _taking(parameters, name, [value])
            if _keep_out(option, name, value):
                options.append(option)
    return options


def _taking(parameters: dict[str, Any], name: str, values: list[Any]) -> dict[str, Any]:
    """A copy of ``parameters`` whose argument ``name`` is required and takes one of ``values``."""
    option = copy.deepcopy(parameters)
    if "const" not in option["properties"][name]:
        option["properties"][name]["enum"] = values
    option["required"] = sorted({*option.get("required", []), name})
    return option


def _keep_out(option: dict[str, Any], name: str, value: object) -> bool:
    """Take ``value`` out of ``option``'s top-level arguments other than ``name``.

    An optional argument left with no value is dropped; ``False`` when a required one would be
    (no call could then take ``value`` in ``name``).
    """
    properties = option["properties"]
    for other, child in list(properties.items()):
        if other == name or not isinstance(child, dict):
            continue
        closed = closed_values(child)
        if closed is None:
            continue
        kept = [v for v in closed if not same_value(v, value)]
        if kept and "const" not in child:
            child["enum"] = kept
        elif not kept and other in option.get("required", []):
            return False
        elif not kept:
            del properties[other]
    return True


def closed_values(schema: dict[str, Any]) -> list[Any] | None:
    """The values a property may take if it is a closed set (its ``enum``, or its ``const``)."""
    if "const" in schema:
        return [schema["const"]]
    closed = schema.get("enum")
    return closed if isinstance(closed, list) else None


def same_value(a: object, b: object) -> bool:
    """Whether two argument values are one value (numbers by value; a boolean is no number)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return isinstance(a, str) and a == b


def _restrict(schema: dict[str, Any], values: _Values, strict: bool) -> bool:
    """Restrict ``schema`` in place to ``values``; false when, ``strict``, it cannot be copied."""
    if "const" in schema:
        return True
    if isinstance(schema.get("enum"), list):
        mentioned = [value for value in schema["enum"] if values.mention(value)]
        schema["enum"] = mentioned or schema["enum"]
        return True
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        for name, child in list(properties.items()):
            if isinstance(child, dict) and not _restrict(child, values, strict):
                if name in required:
                    return False
                del properties[name]
        return True
    if kind == "array" and isinstance(schema.get("items"), dict):
        return _restrict(schema["items"], values, strict)
    candidates: list[Any] = []
    if kind == "string":
        candidates = list(values.strings)
    elif kind == "integer":
        candidates = [n for n in values.numbers if isinstance(n, int)]
    elif kind == "number":
        candidates = list(values.numbers)
    if not candidates:
        return True
    accepted = _accepted(schema, candidates)
    if kind == "string" and values.joins > 1 and len(accepted) > 1 and "pattern" not in schema:
        pattern, longest = joined_pattern(accepted, values.joins)
        schema["pattern"] = pattern
        schema["maxLength"] = min(schema.get("maxLength", longest), longest)
    elif accepted:
        schema["enum"] = accepted
    return bool(accepted) or not strict


_CONSTRAINTS = frozenset(
    {
        "pattern",
        "format",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    }
)


def _accepted(schema: dict[str, Any], candidates: list[Any]) -> list[Any]:
    """The ``candidates`` that meet ``schema``'s own constraints (all, if it has none)."""
    if not _CONSTRAINTS & schema.keys():
        return candidates
    validator = jsonschema.Draft202012Validator(
        {key: schema[key] for key in _CONSTRAINTS & schema.keys()},
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )
    return [value for value in candidates if validator.is_valid(value)]


def _number(span: str) -> int | float | None:
    """``span`` as a JSON number, if it is one (``"42"``, ``"-3.5"``; not ``"1e999"``)."""
    try:
        value = json.loads(span)
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if abs(value) < 1e15 else None
