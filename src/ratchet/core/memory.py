"""An agent's memory: exemplars (verified episodes shown as demonstrations) and insights (rules).

This module is the one home of exemplars: the record, how a verified trajectory becomes one,
how one is shown to the model, and how the most similar ones are retrieved for a task (BM25
over env, family, difficulty and instruction, within a token budget).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ratchet.core.task import Task
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


def to_exemplar(trajectory: Trajectory) -> Exemplar:
    """Keep the turns after the task message: the calls and results that solved it."""
    start = next(i for i, m in enumerate(trajectory.messages) if m["role"] == "user") + 1
    turns = tuple(m for m in trajectory.messages[start:] if m["role"] in ("assistant", "tool"))
    task = trajectory.task
    return Exemplar(task.env, task.family, task.difficulty, task.instruction, turns, task.problem)


def demonstration(exemplar: Exemplar) -> list[dict[str, Any]]:
    """Return an exemplar as conversation turns to place before the real task."""
    return [{"role": "user", "content": exemplar.instruction}, *exemplar.turns]


def estimate_tokens(exemplar: Exemplar) -> int:
    """Estimate an exemplar's prompt size (about four characters per token)."""
    return len(json.dumps([exemplar.instruction, exemplar.turns])) // 4


def _document(env: str, family: str, difficulty: int, instruction: str) -> str:
    # Family and difficulty go in as words so that structurally similar tasks rank first even
    # when their surface text (names, numbers) differs.
    return f"{env} {family} level{difficulty} {instruction}"


class ExemplarIndex:
    """A BM25 index over exemplars, built once and queried per task.

    Args:
        exemplars: The pool to retrieve from.
    """

    def __init__(self, exemplars: Sequence[Exemplar]) -> None:
        self.exemplars = tuple(exemplars)
        self._index = None
        if self.exemplars:
            import bm25s

            docs = [_document(e.env, e.family, e.difficulty, e.instruction) for e in self.exemplars]
            self._index = bm25s.BM25()
            self._index.index(bm25s.tokenize(docs, show_progress=False), show_progress=False)

    def select(self, task: Task, k: int, max_tokens: int | None = None) -> tuple[Exemplar, ...]:
        """Return up to ``k`` exemplars from ``task``'s env, most similar first.

        An exemplar of the task's own problem (or wording) is never returned: it would give the
        answer.
        With ``max_tokens``, stop before the demonstrations' estimated size would exceed it.
        """
        if self._index is None or k <= 0:
            return ()
        import bm25s

        query = bm25s.tokenize(
            [_document(task.env, task.family, task.difficulty, task.instruction)],
            show_progress=False,
        )
        ranked, _ = self._index.retrieve(query, k=len(self.exemplars), show_progress=False)
        chosen: list[Exemplar] = []
        budget = max_tokens if max_tokens is not None else float("inf")
        for position in ranked[0]:
            exemplar = self.exemplars[int(position)]
            own = exemplar.problem == task.problem or exemplar.instruction == task.instruction
            if exemplar.env != task.env or own:
                continue
            budget -= estimate_tokens(exemplar)
            if budget < 0 or len(chosen) == k:
                break
            chosen.append(exemplar)
        return tuple(chosen)
