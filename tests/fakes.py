"""Fakes shared by tests: calc agents whose skill depends on what their prompt holds, a
character tokenizer, and a silent progress display that records its bars."""

from __future__ import annotations

import io
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, TaskID

from ratchet.engine.models.base import Prompt, TrainResult
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


def skilled_model(skill: float, seed: int = 0) -> FakeModel:
    """A calc agent that answers right with probability ``skill`` (at once, with ``finish``)."""

    def reply(prompt: Prompt, rng: random.Random) -> str:
        task = [m["content"] for m in prompt.messages if m["role"] == "user"][-1]
        answer = solve_calc(task) if rng.random() < skill else -12345
        return json.dumps({"name": "finish", "arguments": {"answer": str(answer)}})

    return FakeModel(reply=reply, seed=seed)


SKILL_FILE = "skill.json"


def skill_of(adapter) -> float | None:
    """The skill a :class:`FakeTrainer` wrote into an adapter directory (``None``: no adapter)."""
    if adapter is None or not (Path(adapter) / SKILL_FILE).is_file():
        return None
    return json.loads((Path(adapter) / SKILL_FILE).read_text())["skill"]


@dataclass
class FakeTrainer:
    """A trainer that records what it was given and writes an 'adapter' holding a skill level:
    the start's skill (or ``base``) plus ``gain``, capped; :func:`skill_backends` plays it."""

    base: float = 0.2
    gain: float = 0.5
    calls: list = field(default_factory=list)

    def _train(self, method, data, out, settings, start):
        self.calls.append(
            {"method": method, "data": list(data), "start": start, "settings": settings}
        )
        if not data:
            return None
        before = skill_of(start) if start is not None else None
        skill = min(0.95, (self.base if before is None else before) + self.gain)
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / SKILL_FILE).write_text(json.dumps({"skill": skill, "method": method}))
        return TrainResult(len(data), (0.7, 0.5))

    def sft(self, episodes, out, settings, progress=None):
        return self._train("sft", [e for e in episodes if e.passed], out, settings, None)

    def dpo(self, pairs, out, settings, start=None, progress=None, anchors=()):
        result = self._train("dpo", pairs, out, settings, start)
        self.calls[-1]["anchors"] = list(anchors)
        return result

    def grpo(self, episodes, out, settings, start=None, progress=None):
        return self._train("grpo", episodes, out, settings, start)


def skill_backends(base: float = 0.2):
    """Backends whose calc skill is the base's, or the one a :class:`FakeTrainer` adapter holds."""

    def backend(agent, directory):
        skill = skill_of(agent.adapter_path(directory))
        return skilled_model(base if skill is None else skill)

    return backend


def lever_context(experience, workdir, **fields):
    """A calc :class:`LeverContext` for lever tests: version v1, no models, ``fields`` set."""
    from ratchet.core.agent import Agent
    from ratchet.envs.calc import env
    from ratchet.improve.levers import LeverContext

    defaults = {"incumbent": Agent(model="local"), "model": None, "reflector": None}
    values = {**defaults, "trainer": None, **fields}
    return LeverContext(env=env, experience=experience, workdir=workdir, version="v1", **values)


def describe_task(env, trajectory):
    """The task ``env.describe`` names for ``trajectory`` (``None`` if none), ready to replay."""
    from ratchet.core.env import problem_key_of
    from ratchet.core.task import make_task

    spec = env.describe(trajectory)
    if spec is None:
        return None
    return make_task(
        env.name, spec, difficulty=spec.difficulty or 1, problem_key=problem_key_of(env)
    )


class CharTokenizer:
    """A chat tokenizer with one token per character, so rendering and loss masks read back as
    text (``vocab``: ids folded into ``1..vocab-1`` for a tiny model; ``None``: ``ord``)."""

    eos_token = "\x03"
    pad_token_id = 0

    def __init__(self, vocab: int | None = None) -> None:
        self.vocab = vocab

    def apply_chat_template(self, conversation, tokenize=False, add_generation_prompt=False):
        text = "".join(f"<{m['role']}>{m['content']}\x03\n" for m in conversation)
        return text + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        if self.vocab is None:
            return {"input_ids": [ord(c) for c in text]}
        return {"input_ids": [1 + ord(c) % (self.vocab - 1) for c in text]}


class WatchedProgress(Progress):
    """A silent progress display that records each bar's count after every advance."""

    def __init__(self) -> None:
        super().__init__(console=Console(file=io.StringIO()), disable=True)
        self.advances: list[tuple[str, float, float | None]] = []

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        task = self._tasks[task_id]
        self.advances.append((task.description, task.completed, task.total))
