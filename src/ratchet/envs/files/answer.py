"""Checking a ``files`` question's final answer: every fact stated, and nothing hedged.

A fact is stated when it appears as a whole token (``logs/auth-2024-03-05.log``, ``7``,
``auth_42``). An answer that also names other values *of the same shape* (another log path,
another number, another person) lists candidates instead of answering, and fails: otherwise
"E4820, E4821 or E4822", or every log file in the workspace, would pass.
"""

from __future__ import annotations

import re

from ratchet.envs.files.world import PEOPLE, SERVICES

MAX_ANSWER_CHARS = 2000
_BEFORE, _AFTER = r"(?<![\w./-])", r"(?![\w/-])"
_VOCABULARIES = (SERVICES, PEOPLE)
_PIECES = re.compile(
    r"(\d+|" + "|".join(w for vocabulary in _VOCABULARIES for w in vocabulary) + ")"
)


def answer_problems(answer: str | None, facts: list[str]) -> list[str]:
    """Return why ``answer`` does not answer a question whose answer is ``facts`` (or ``[]``)."""
    if not facts:
        return []
    if answer is None:
        return ["no final answer was given"]
    if len(answer) > MAX_ANSWER_CHARS:
        return [f"the final answer is over {MAX_ANSWER_CHARS} characters; state the facts briefly"]
    problems = []
    missing = [fact for fact in facts if not states(answer, fact)]
    if missing:
        problems.append(f"the final answer does not state {', '.join(missing)}")
    others = candidates(answer, facts)
    if others:
        problems.append(
            f"the final answer also names {', '.join(others[:3])}: state only what was asked"
        )
    return problems


def states(answer: str, fact: str) -> bool:
    """Whether ``fact`` appears in ``answer`` as a whole token (case aside)."""
    pattern = _BEFORE + re.escape(fact) + _AFTER
    return re.search(pattern, answer, flags=re.IGNORECASE) is not None


def candidates(answer: str, facts: list[str]) -> list[str]:
    """Values in ``answer`` shaped like one of the facts but not one of them, in order."""
    wanted = {fact.lower() for fact in facts}
    found: list[str] = []
    for shape in dict.fromkeys(_shape(fact) for fact in facts):
        for match in re.finditer(_BEFORE + shape + _AFTER, answer, flags=re.IGNORECASE):
            value = match.group(0)
            if value.lower() not in wanted and value not in found:
                found.append(value)
    return found


def _shape(fact: str) -> str:
    """A pattern for values like ``fact``: its numbers and its service or person names vary."""
    pattern = []
    for piece in _PIECES.split(fact):
        if piece.isdigit():
            pattern.append(r"\d+")
        elif vocabulary := next((v for v in _VOCABULARIES if piece in v), None):
            pattern.append("(?:" + "|".join(vocabulary) + ")")
        else:
            pattern.append(re.escape(piece))
    return "".join(pattern)
