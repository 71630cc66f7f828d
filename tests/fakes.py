"""Fake models shared by tests: calc agents whose skill depends on what their prompt holds."""

from __future__ import annotations

import json
import random
import re

from ratchet.engine.models.base import Prompt
from ratchet.engine.models.fake import FakeModel

_STORY = {
    r"gets (\d+) more": "+",
    r"gives away (\d+)": "-",
    r"grows to (\d+) times": "*",
    r"splits them into (\d+) equal piles": "/",
}


def solve_calc(instruction: str) -> int | None:
    """Compute a calc task's answer from its text (expressions and word problems)."""
    if instruction.startswith("Compute "):
        return int(eval(instruction[len("Compute ") : -1], {"__builtins__": {}}))
    start = re.search(r"has (\d+) ", instruction)
    if start is None:
        return None
    value = int(start.group(1))
    for clause in instruction.split(", then "):
        for pattern, op in _STORY.items():
            for n in re.findall(pattern, clause):
                value = int(eval(f"{value} {op} {n}", {"__builtins__": {}}))
    return value


def is_task(text: str) -> bool:
    return text.startswith("Compute ") or " has " in text


def learning_model(skilled: float = 0.9, unskilled: float = 0.1, seed: int = 0) -> FakeModel:
    """A calc agent that answers right with probability ``skilled`` when its prompt shows
    demonstrations (earlier solved conversations) and ``unskilled`` otherwise."""

    def reply(prompt: Prompt, rng: random.Random) -> str:
        tasks = [
            m["content"] for m in prompt.messages if m["role"] == "user" and is_task(m["content"])
        ]
        chance = skilled if len(tasks) > 1 else unskilled
        answer = solve_calc(tasks[-1]) if rng.random() < chance else -12345
        return json.dumps({"name": "finish", "arguments": {"answer": str(answer)}})

    return FakeModel(reply=reply, seed=seed)


def exploring_model(seed: int = 0) -> FakeModel:
    """A calc agent that computes something off-task (start + a random number) and reports it:
    it never solves its task, but every episode achieved a smaller one for hindsight."""

    def reply(prompt: Prompt, rng: random.Random) -> str:
        results = [m for m in prompt.messages if m["role"] == "tool"]
        if results:
            return json.dumps({"name": "finish", "arguments": {"answer": results[-1]["content"]}})
        task = [m["content"] for m in prompt.messages if m["role"] == "user"][-1]
        start = int(re.findall(r"\d+", task)[0])
        return json.dumps({"name": "add", "arguments": {"a": start, "b": rng.randint(1, 9)}})

    return FakeModel(reply=reply, seed=seed)
