"""An agent's memory: exemplars, insights (rules) and skills (procedures offered as tools).

This module is the one home of memory records. Exemplars are verified episodes shown as
demonstrations: the record, how a verified trajectory becomes one, how one is shown to the
model, and how the most similar ones are retrieved for a task (BM25 over what the agent sees:
the instruction and tool names, within a token budget; never the task's family or difficulty,
which come from the generator). Insights are rules with votes. A skill is
data, never code: a list of calls of the env's own tools whose arguments are bound to the
skill's parameters, to results of earlier steps, or to fixed values; here are its record, its
tool schema and which skills a task is offered, and :mod:`ratchet.engine.skills` runs it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ratchet.core.task import Task, member_of
from ratchet.core.tool import Tool, ToolError
from ratchet.core.trajectory import Trajectory


@dataclass(frozen=True)
class Exemplar:
    """A verified successful episode kept as a demonstration.

    Attributes:
        env: The env it came from.
        family: The task's family.
        difficulty: The task's difficulty.
        instruction: The task text the agent saw.
        turns: The assistant and tool messages that solved it (OpenAI chat format).
        problem: The task's problem key.
    """

    env: str
    family: str
    difficulty: int
    instruction: str
    turns: tuple[dict[str, Any], ...]
    problem: str = ""


@dataclass(frozen=True)
class Insight:
    """A rule learned from experience, with the votes it has collected (ExpeL-style).

    Attributes:
        rule: The rule, in one sentence.
        helpful: Times a reflection added or confirmed it.
        harmful: Times a reflection voted it down.
    """

    rule: str
    helpful: int = 1
    harmful: int = 0


@dataclass(frozen=True)
class SkillStep:
    """One call of a skill.

    Attributes:
        tool: The env tool it calls.
        arguments: Per argument name, where its value comes from: ``{"param": NAME}`` (the
            skill's parameter), ``{"result": I}`` (the text step ``I`` returned),
            ``{"result": I, "json": true}`` (that text parsed as JSON), ``{"result": I,
            "field": KEY}`` (one field of that JSON object) or ``{"value": V}`` (a fixed value).
    """

    tool: str
    arguments: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Skill:
    """A parameterised tool-call procedure, mined from verified successes and offered as a tool.

    Attributes:
        name: The tool name it is offered under.
        description: What it does, for the model.
        env: The env it belongs to.
        parameters: JSON schema of each parameter, by name (from the underlying tools').
        steps: The calls it makes, in order.
        families: Task families it was mined from and admitted on.
        difficulty: The lowest difficulty of the tasks it was mined from.
        support: Distinct training problems whose solution contained it.
        examples: A few instructions of those problems (for retrieval).
    """

    name: str
    description: str
    env: str
    parameters: dict[str, dict[str, Any]]
    steps: tuple[SkillStep, ...]
    families: tuple[str, ...] = ()
    difficulty: int = 1
    support: int = 1
    examples: tuple[str, ...] = ()

    @property
    def tools(self) -> tuple[str, ...]:
        """The env tools it calls, in order."""
        return tuple(step.tool for step in self.steps)

    def tool(self) -> Tool:
        """The skill as a tool: its schema and argument checks (the harness runs its steps)."""
        parameters = {
            "type": "object",
            "properties": dict(self.parameters),
            "required": list(self.parameters),
            "additionalProperties": False,
        }
        return Tool.from_schema(self.name, self.description, parameters, _run_by_the_harness)


def _run_by_the_harness(**arguments: Any) -> Any:
    raise ToolError("a skill runs step by step in the harness (ratchet.engine.skills)")


def select_skills(skills: Sequence[Skill], task: Task, k: int) -> tuple[Skill, ...]:
    """Return up to ``k`` of ``skills`` for ``task``: its env's, the most relevant first.

    Relevance is what the agent can see: the word overlap of the task's instruction with the
    skill's examples, then support. The task's family and difficulty (the generator's labels)
    are not read.
    """
    words = _words(task.instruction)

    def rank(skill: Skill) -> tuple[float, int]:
        seen = set().union(*(_words(e) for e in skill.examples)) if skill.examples else set()
        return len(words & seen) / max(1, len(words | seen)), skill.support

    mine = [skill for skill in skills if skill.env == member_of(task)]
    return tuple(sorted(mine, key=rank, reverse=True)[: max(0, k)])


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def to_exemplar(trajectory: Trajectory) -> Exemplar:
    """Keep the turns after the task message: the calls and results that solved it."""
    start = next(i for i, m in enumerate(trajectory.messages) if m["role"] == "user") + 1
    turns = tuple(m for m in trajectory.messages[start:] if m["role"] in ("assistant", "tool"))
    task = trajectory.task
    # A suite's member, not the suite: demonstrations come from the env of the task shown.
    env = member_of(task)
    return Exemplar(env, task.family, task.difficulty, task.instruction, turns, task.problem)


def demonstration(exemplar: Exemplar) -> list[dict[str, Any]]:
    """Return an exemplar as conversation turns to place before the real task."""
    return [{"role": "user", "content": exemplar.instruction}, *exemplar.turns]


def estimate_tokens(exemplar: Exemplar) -> int:
    """Estimate an exemplar's prompt size (about four characters per token)."""
    return len(json.dumps([exemplar.instruction, exemplar.turns])) // 4


def _document(instruction: str, tools: Sequence[str]) -> str:
    # Tool names go in as words (``tool_divide``) so a task offered the tools an exemplar used
    # ranks it first; the generator's family and difficulty labels never go in.
    return " ".join([instruction, *(f"tool_{name}" for name in tools)])


def called_tools(exemplar: Exemplar) -> tuple[str, ...]:
    """The names of the tools the exemplar's turns call, in order."""
    return tuple(
        str(call.get("function", {}).get("name", ""))
        for turn in exemplar.turns
        for call in turn.get("tool_calls") or ()
        if isinstance(call, dict)
    )


class ExemplarIndex:
    """A BM25 index over exemplars, built once and queried per task.

    An exemplar is indexed by its instruction and the tools its turns call; a task is looked up
    by its instruction and the tools it offers: only what the agent sees.

    Args:
        exemplars: The pool to retrieve from.
    """

    def __init__(self, exemplars: Sequence[Exemplar]) -> None:
        self.exemplars = tuple(exemplars)
        self._index = None
        if self.exemplars:
            import bm25s

            docs = [_document(e.instruction, called_tools(e)) for e in self.exemplars]
            self._index = bm25s.BM25()
            self._index.index(bm25s.tokenize(docs, show_progress=False), show_progress=False)

    def select(
        self, task: Task, k: int, max_tokens: int | None = None, tools: Sequence[str] = ()
    ) -> tuple[Exemplar, ...]:
        """Return up to ``k`` exemplars from ``task``'s env, most similar first.

        A suite's task gets exemplars of its own member env only (see
        :func:`~ratchet.core.task.member_of`).

        Similarity reads the task's instruction and the names of the ``tools`` it offers, never
        its family or difficulty. An exemplar of the task's own problem (or wording) is never
        returned: it would give the answer.
        With ``max_tokens``, stop before the demonstrations' estimated size would exceed it.
        """
        if self._index is None or k <= 0:
            return ()
        import bm25s

        query = bm25s.tokenize([_document(task.instruction, tools)], show_progress=False)
        ranked, _ = self._index.retrieve(query, k=len(self.exemplars), show_progress=False)
        chosen: list[Exemplar] = []
        budget = max_tokens if max_tokens is not None else float("inf")
        for position in ranked[0]:
            exemplar = self.exemplars[int(position)]
            own = exemplar.problem == task.problem or exemplar.instruction == task.instruction
            if exemplar.env != member_of(task) or own:
                continue
            budget -= estimate_tokens(exemplar)
            if budget < 0 or len(chosen) == k:
                break
            chosen.append(exemplar)
        return tuple(chosen)
