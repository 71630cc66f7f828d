"""Judging a files episode: the workspace's final state, and the facts in the final answer."""

from __future__ import annotations

import json
import re
from typing import Any

from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.envs.files.answer import MAX_ANSWER_CHARS, answer_problems
from ratchet.envs.files.workspace import FilesWorld

_SEPARATORS = re.compile(r"\s*(?:[,;\n]|\band\b)\s*", flags=re.IGNORECASE)


def check(task: Task, world: FilesWorld, answer: str | None) -> Verdict:
    """Judge the workspace ``world`` was left in, and ``answer``, against ``task``'s params."""
    params = task.params
    problems = _state_problems(task, world)
    if params.get("exact") and params["answer"]:
        problems += _exact_problems(answer, params["answer"])
    else:
        problems += answer_problems(answer, params["answer"])
    total = len(params["expect"]) + len(params["absent"]) + len(params["answer"])
    return Verdict.of(
        not problems,
        "; ".join(problems[:5]) if problems else "the workspace is as required",
        problems=float(len(problems)),
        requirements=float(total),
    )


def _exact_problems(answer: str | None, facts: list[str]) -> list[str]:
    if answer is None:
        return ["no final answer was given"]
    if len(answer) > MAX_ANSWER_CHARS:
        return [f"the final answer is over {MAX_ANSWER_CHARS} characters; state the facts briefly"]
    if answer_parts(answer) != [fact.lower() for fact in facts]:
        return ["the final answer is not exactly the value(s) asked for"]
    return []


def answer_parts(answer: str) -> list[str]:
    """Split an answer into the values it lists, lower-cased, quotes and end stops dropped.

    ``"8042, alice_12."`` gives ``["8042", "alice_12"]``; commas, semicolons, new lines and
    "and" separate values.
    """
    parts = (part.strip().rstrip(".").strip("'\"` ") for part in _SEPARATORS.split(answer))
    return [part.lower() for part in parts if part]


def oracle(task: Task) -> list[ToolCall]:
    """The oracle: read what the task needs, move, write, delete, then finish with the facts."""
    params = task.params
    calls = [ToolCall(read["name"], dict(read["arguments"])) for read in params["reads"]]
    moved = {dest for _, dest in params["moves"]}
    calls += [ToolCall("move_file", {"source": s, "destination": d}) for s, d in params["moves"]]
    for path, want in params["expect"].items():
        if path in moved:
            continue
        content = want["text"] if "text" in want else json.dumps(want["json"], indent=2)
        calls.append(ToolCall("write_file", {"path": path, "content": content + "\n"}))
    sources = {source for source, _ in params["moves"]}
    calls += [ToolCall("delete_file", {"path": p}) for p in params["absent"] if p not in sources]
    answer = ", ".join(params["answer"]) if params["answer"] else "done"
    return [*calls, ToolCall("finish", {"answer": answer})]


def _state_problems(task: Task, world: FilesWorld) -> list[str]:
    params = task.params
    files = world.snapshot()
    problems = []
    for path, want in params["expect"].items():
        data = files.get(path)
        if path not in files:
            problems.append(f"{path} is missing")
        elif data is None or not _matches(data, want):
            problems.append(f"{path} does not have the expected content")
    problems += [f"{path} should be gone" for path in params["absent"] if path in files]
    if params["keep"]:
        touched = {*params["expect"], *params["absent"]}
        for path, content in world.start.files.items():
            if path not in touched and files.get(path) != content.encode():
                problems.append(f"{path} was changed or removed but should be untouched")
    return problems


def _matches(data: bytes, want: dict[str, Any]) -> bool:
    text = data.decode("utf-8", "replace")
    if "json" in want:
        try:
            return bool(json.loads(text) == want["json"])
        except json.JSONDecodeError:
            return False
    return _normalise(text) == _normalise(want["text"])


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())
