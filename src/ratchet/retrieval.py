"""Retrieval of demonstrations: the most similar verified episodes for a task (BM25)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ratchet.agent import Exemplar
from ratchet.task import Task


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

        An exemplar with the task's own instruction is never returned: it would give the answer.
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
            if exemplar.env != task.env or exemplar.instruction == task.instruction:
                continue
            budget -= estimate_tokens(exemplar)
            if budget < 0 or len(chosen) == k:
                break
            chosen.append(exemplar)
        return tuple(chosen)


def estimate_tokens(exemplar: Exemplar) -> int:
    """Estimate an exemplar's prompt size (about four characters per token)."""
    return len(json.dumps([exemplar.instruction, exemplar.turns])) // 4
