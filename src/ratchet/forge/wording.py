"""Instructions for forged tasks: templates over the calls, optionally reworded by a model.

Each call of a walk becomes one sentence, from the source's template for its tool (formatted
with the call's arguments and ``{changes}``, what the call changed), or a plain sentence from
the tool's description and arguments. Argument values stay exactly as the tool takes them,
so an agent can copy them. A model, where one is configured, may reword an instruction; the
rewording is kept only if it still holds every argument value and names no value of the
world that the template did not (an id the task never gave, the answer to a question).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratchet.core.tool import Tool, ToolCall
from ratchet.engine.models.base import Model, Prompt, Sampling

ACTION_END = "Then call finish."
QUESTION_END = "Answer with finish."
CHANGES = "changes"
REWORD_BATCH = 16
REWORD_SYSTEM = (
    "You reword task instructions for an agent that uses tools. Keep the meaning and keep "
    "every value (ids, names, numbers, quoted words) exactly as written; add no facts, hints "
    "or values of your own. Reply with the reworded instruction only, in one paragraph."
)


def check_templates(templates: Mapping[str, str], tools: Sequence[Tool]) -> None:
    """Refuse templates for unknown tools or with fields the tool's call does not have.

    Raises:
        ValueError: Naming the template and the problem.
    """
    by_name = {tool.name: tool for tool in tools}
    for name, template in templates.items():
        if name not in by_name:
            raise ValueError(f"template for {name!r}: no such tool ({', '.join(by_name)})")
        allowed = {*by_name[name].parameters.get("properties", {}), CHANGES}
        for _, field, _, _ in string.Formatter().parse(template):
            if field is not None and field.split(".")[0].split("[")[0] not in allowed:
                raise ValueError(
                    f"template for {name!r} uses {{{field}}}; its fields are "
                    f"{', '.join(sorted(allowed))}"
                )


def sentence(templates: Mapping[str, str], tool: Tool, call: ToolCall, changes: str = "") -> str:
    """One call as a sentence: its template filled in, or a plain one from the description."""
    shown = {name: show(value) for name, value in call.arguments.items()}
    template = templates.get(call.name)
    if template is not None:
        fields = {p: "" for p in tool.parameters.get("properties", {})}
        return template.format(**{**fields, **shown, CHANGES: changes})
    what = tool.description.split("\n")[0].strip().rstrip(".")
    if not shown:
        return f"{what}."
    listed = ", ".join(f"{name} {value}" for name, value in shown.items())
    return f"{what}: {listed}."


def show(value: Any) -> str:
    """An argument value as the instruction writes it (lists joined by commas)."""
    if isinstance(value, list):
        return ", ".join(show(v) for v in value)
    return str(value)


def action(sentences: Sequence[str]) -> str:
    """The instruction of a walk that changes the world."""
    return " ".join([*sentences, ACTION_END])


def question(templates: Mapping[str, str], tool: Tool, call: ToolCall) -> str:
    """The instruction of a question about one read: its template, or a plain question."""
    if call.name in templates:
        asked = sentence(templates, tool, call)
    else:
        listed = ", ".join(f"{name} {show(value)}" for name, value in call.arguments.items())
        asked = f"What does {call.name} return" + (f" for {listed}?" if listed else "?")
    return f"{asked} {QUESTION_END}"


def values_of(call: ToolCall) -> list[str]:
    """The argument values an instruction must keep, as written."""
    found: list[str] = []
    for value in call.arguments.values():
        items = value if isinstance(value, list) else [value]
        found += [show(v) for v in items if show(v)]
    return found


@dataclass(frozen=True)
class Rewording:
    """What a model's rewording of an instruction came to.

    Attributes:
        text: The instruction to use: the model's, or the template's if it was refused.
        refused: Why the model's was refused (``None``: it was kept).
    """

    text: str
    refused: str | None = None


def leaks(text: str, template: str, kept: Sequence[str], hidden: set[str]) -> str | None:
    """Why a rewording cannot stand in for ``template`` (``None``: it can).

    It must keep every value of ``kept`` verbatim and name no value of ``hidden`` (the world's
    state and the answer) that the template does not name.
    """
    if not text.strip():
        return "empty"
    if len(text) > 3 * len(template) + 80:
        return "much longer than the template"
    missing = [value for value in kept if value not in text]
    if missing:
        return f"drops the value {missing[0]!r}"
    for value in sorted(hidden, key=len, reverse=True):
        if len(value) < 2 or _names(template, value):
            continue
        if _names(text, value):
            return f"names {value!r}, which the task does not give"
    return None


def _names(text: str, value: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(value)}(?![\w])", text, re.IGNORECASE) is not None


def reword(
    model: Model, instructions: Sequence[tuple[str, Sequence[str], set[str]]]
) -> list[Rewording]:
    """Reword ``(template, kept values, hidden values)`` instructions with ``model``, checked.

    A failed request or a refused rewording keeps the template.
    """
    results: list[Rewording] = []
    sampling = Sampling(temperature=0.3, max_tokens=200, seed=0)
    for start in range(0, len(instructions), REWORD_BATCH):
        batch = instructions[start : start + REWORD_BATCH]
        prompts = [
            Prompt(
                (
                    {"role": "system", "content": REWORD_SYSTEM},
                    {"role": "user", "content": template},
                )
            )
            for template, _, _ in batch
        ]
        for (template, kept, hidden), reply in zip(
            batch, model.complete(prompts, sampling), strict=True
        ):
            if reply.error is not None:
                results.append(Rewording(template, f"the model failed: {reply.error}"))
                continue
            text = " ".join(reply.text.split())
            why = leaks(text, template, kept, hidden)
            results.append(Rewording(template, why) if why else Rewording(text))
    return results
