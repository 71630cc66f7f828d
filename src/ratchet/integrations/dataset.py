"""A dataset as an env: each row a question, scored on the answer the agent passes to ``finish``.

Any rows work: a list of dicts, a mapping of split names to lists of dicts, or a Hugging Face
``datasets`` ``Dataset`` or ``DatasetDict`` (iterated like any rows, so ``datasets`` is never
imported here). The dataset's own splits are used as given (``validation``, ``valid``, ``val``
and ``dev`` are Ratchet's ``probe``); a split it lacks is carved from its train rows by
problem-key hash, and rows with no splits at all are split that way (80/10/10).

A row's problem is its question and expected answer, so the same question worded the same way
is one problem wherever it appears (see :class:`~ratchet.core.pool.TaskPool` for how overlaps
between splits are resolved: a row repeated in a more held-out split is dropped from the less
held-out one, and :class:`RepeatedRows` is warned, with how many rows went from which split).
Scoring is a function of the submitted and expected answers: :func:`exact_match`,
:func:`numeric_match` or your own, returning a bool, a score in [0, 1] (passed at 1) or a
:class:`~ratchet.core.verdict.Verdict`.

Example::

    env = dataset_env(load_dataset("openai/gsm8k", "main"), name="gsm8k", match="numeric",
                      expected=lambda row: row["answer"].split("####")[-1])
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from ratchet.core.env import FINISH, SimpleEnv
from ratchet.core.pool import TaskPool, dropped_text
from ratchet.core.task import SPLITS, Split, Task, TaskSpec, canonical_key, split_of
from ratchet.core.tool import Tool, ToolCall
from ratchet.core.verdict import Verdict

Row = Mapping[str, Any]
Match = Callable[[str, str], "bool | float | Verdict"]

SPLIT_NAMES: dict[str, Split] = {
    "train": "train",
    "training": "train",
    "probe": "probe",
    "validation": "probe",
    "valid": "probe",
    "val": "probe",
    "dev": "probe",
    "test": "test",
}
"""Dataset split names Ratchet understands, and the Ratchet split each becomes."""

_NUMBER = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")


class RepeatedRows(UserWarning):
    """Rows of one split are repeated in a more held-out split and were dropped from it."""


def exact_match(answer: str, expected: str) -> bool:
    """Whether two answers are equal once case, outer quotes, spacing and a final period go."""
    return _normal(answer) == _normal(expected)


def numeric_match(answer: str, expected: str) -> bool:
    """Whether the answer states exactly one number and it equals the expected one.

    Commas between thousands and a leading ``$`` are fine (``$1,000``); an answer with several
    numbers (``41, 42 or 43``), none, or a non-finite one does not match, so hedging never pays.
    The comparison allows a relative error of 1e-9.
    """
    stated, wanted = _numbers(answer), _numbers(expected)
    if len(stated) != 1 or len(wanted) != 1:
        return False
    value, target = stated[0], wanted[0]
    return math.isfinite(value) and math.isclose(value, target, rel_tol=1e-9, abs_tol=1e-12)


def dataset_env(
    data: Iterable[Row] | Mapping[str, Iterable[Row]],
    *,
    name: str,
    description: str = "",
    question: str = "question",
    answer: str = "answer",
    match: Literal["exact", "numeric"] | Match = "exact",
    expected: Callable[[Row], Any] | None = None,
    instruction: Callable[[Row], str] | None = None,
    tools: Sequence[Callable[..., Any] | Tool] = (),
    difficulty: str | None = None,
    family: str | None = None,
    policy: str = "",
    version: str = "1",
) -> SimpleEnv[None]:
    """Return an env whose tasks are the dataset's rows.

    Args:
        data: Rows, or split name to rows (a ``DatasetDict`` is one).
        name: The env's name.
        description: One line for ``ratchet envs``.
        question: The column holding the question.
        answer: The column holding the expected answer.
        match: ``"exact"``, ``"numeric"`` or ``match(submitted, expected)``.
        expected: Makes the expected answer from a row (e.g. strip a worked solution down to
            its final number); default: the ``answer`` column as text.
        instruction: Makes the text the agent sees from a row; default: the question.
        tools: Tools the agent may use besides ``finish`` (stateless: one set for every task).
        difficulty: A column of integer difficulties (default: every row is difficulty 1).
        family: A column naming each row's task family.
        policy: Rules shown to the agent with every task.
        version: Bumped whenever rows or scoring change meaning.

    Raises:
        ValueError: On an unknown split name, a row without the question or answer column, or
            an unknown ``match``.
    """
    score = _matcher(match)
    columns = _Columns(question, answer, expected, instruction, difficulty, family)
    splits = _splits(data, columns)
    pool = TaskPool(**splits)
    _warn_repeats(name, pool)
    extra = list(tools)

    def verify(task: Task, world: None, submitted: str | None) -> Verdict:
        if submitted is None:
            return Verdict(0.0, False, "no answer was submitted")
        return _verdict(score(submitted, task.params["answer"]))

    return SimpleEnv(
        name=name,
        description=description or f"questions from the {name} dataset, answered with finish",
        sample=pool,
        build=lambda task: None,
        tools=lambda world: extra,
        verify=verify,
        oracle=lambda task: [ToolCall(FINISH, {"answer": task.params["answer"]})],
        policy=policy,
        version=version,
    )


class _Columns:
    """How to read one row into a :class:`TaskSpec`."""

    def __init__(
        self,
        question: str,
        answer: str,
        expected: Callable[[Row], Any] | None,
        instruction: Callable[[Row], str] | None,
        difficulty: str | None,
        family: str | None,
    ) -> None:
        self.question, self.answer, self.expected = question, answer, expected
        self.instruction, self.difficulty, self.family = instruction, difficulty, family

    def spec(self, row: Row, where: str) -> TaskSpec:
        needed = [self.question] + ([] if self.expected else [self.answer])
        missing = [column for column in needed if column not in row]
        if missing:
            raise ValueError(
                f"{where} has no {', '.join(map(repr, missing))} column; it has "
                f"{', '.join(map(repr, row))} (pass question=... and answer=...)"
            )
        target = self.expected(row) if self.expected else row[self.answer]
        params = {"question": str(row[self.question]), "answer": str(target).strip()}
        return TaskSpec(
            self.instruction(row) if self.instruction else params["question"],
            params,
            family=str(row[self.family]) if self.family else "default",
            difficulty=int(row[self.difficulty]) if self.difficulty else 1,
        )


def _splits(
    data: Iterable[Row] | Mapping[str, Iterable[Row]], columns: _Columns
) -> dict[Split, list[TaskSpec]]:
    named = data if isinstance(data, Mapping) else {"train": data}
    unknown = sorted(str(key) for key in named if str(key) not in SPLIT_NAMES)
    if unknown:
        raise ValueError(
            f"unknown split {', '.join(map(repr, unknown))}; use {', '.join(SPLIT_NAMES)}"
        )
    splits: dict[Split, list[TaskSpec]] = {split: [] for split in SPLITS}
    for key, rows in named.items():
        target = SPLIT_NAMES[str(key)]
        for index, row in enumerate(rows):
            splits[target].append(columns.spec(row, f"row {index} of split {key!r}"))
    given = {SPLIT_NAMES[str(key)] for key in named}
    missing = set(SPLITS) - given
    if missing:  # carve what the dataset lacks from its train rows, by problem key
        kept: list[TaskSpec] = []
        for spec in splits["train"]:
            owner = split_of(canonical_key(spec.params))
            (splits[owner] if owner in missing else kept).append(spec)
        splits["train"] = kept
    return splits


def _warn_repeats(name: str, pool: TaskPool) -> None:
    """Warn :class:`RepeatedRows` with how many rows each split loses to a more held-out one."""
    dropped = pool.dropped()
    if dropped:
        warnings.warn(
            f"dataset {name}: {sum(dropped.values())} rows repeated across splits were dropped "
            f"from the less held-out split (test over probe over train): {dropped_text(dropped)}",
            RepeatedRows,
            stacklevel=3,
        )


def _matcher(match: Literal["exact", "numeric"] | Match) -> Match:
    if match == "exact":
        return exact_match
    if match == "numeric":
        return numeric_match
    if callable(match):
        return match
    raise ValueError(f"match must be 'exact', 'numeric' or a function; got {match!r}")


def _verdict(result: bool | float | Verdict) -> Verdict:
    if isinstance(result, Verdict):
        return result
    if isinstance(result, bool):
        return Verdict.of(result, "matches" if result else "does not match the expected answer")
    score = min(1.0, max(0.0, float(result))) if math.isfinite(result) else 0.0
    return Verdict(score, score >= 1.0, f"match score {score:g}")


def _normal(text: str) -> str:
    text = " ".join(text.strip().casefold().split())
    text = text.strip("\"'`")
    return text[:-1] if text.endswith(".") else text


def _numbers(text: str) -> list[float]:
    return [float(found.replace(",", "")) for found in _NUMBER.findall(text.replace("$", ""))]
