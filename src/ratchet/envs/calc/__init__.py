"""``calc``: arithmetic word problems solved with tools; difficulty = number of operations.

Each task is a chain of operations on whole numbers, e.g. difficulty 2 is ``(a + b) * c``.
The agent has ``add``, ``subtract``, ``multiply`` and ``divide`` and submits the result with
``finish(answer)``; the verifier compares the submitted number exactly with the computed value
and rejects non-finite numbers (``nan``, ``inf``).

Hindsight relabelling (:func:`relabel`) turns any trajectory that computed a chain of whole
numbers and submitted its value into an ``expression`` task for that chain, and
:func:`from_params` builds the task for any such chain someone proposes (``PARAMS_SCHEMA``
says what a chain looks like). A chain's problem (:func:`problem_key`) leaves out steps that
change nothing (multiplying or dividing by 1, adding or subtracting 0), so a test problem with
such a step added is still a test problem.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any, TypeGuard

from ratchet.core.env import SimpleEnv
from ratchet.core.task import Task, TaskSpec, canonical_key
from ratchet.core.tool import ToolCall, ToolError
from ratchet.core.trajectory import Trajectory
from ratchet.core.verdict import Verdict

OPS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}

_WORD = {
    "add": "{who} gets {n} more",
    "subtract": "{who} gives away {n}",
    "multiply": "{who}'s pile grows to {n} times its size",
    "divide": "{who} splits them into {n} equal piles and keeps one pile",
}
_LIMIT = 10**9  # largest magnitude a proposed chain may reach
_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana"]
_THINGS = ["apples", "coins", "marbles", "stickers", "books", "shells"]


def add(a: float, b: float) -> float:
    """Return a + b.

    Args:
        a: First number.
        b: Second number.
    """
    return a + b


def subtract(a: float, b: float) -> float:
    """Return a - b.

    Args:
        a: Number to subtract from.
        b: Number to subtract.
    """
    return a - b


def multiply(a: float, b: float) -> float:
    """Return a * b.

    Args:
        a: First factor.
        b: Second factor.
    """
    return a * b


def divide(a: float, b: float) -> float:
    """Return a / b.

    Args:
        a: Dividend.
        b: Divisor (must not be zero).
    """
    if b == 0:
        raise ToolError("division by zero: b must not be 0")
    return a / b


_APPLY: dict[str, Callable[[float, float], float]] = {
    "add": add,
    "subtract": subtract,
    "multiply": multiply,
    "divide": divide,
}


def _sample(rng: random.Random, difficulty: int) -> TaskSpec:
    start = rng.randint(2, 50)
    value, steps = start, []
    for _ in range(difficulty):
        divisors = [d for d in range(2, 10) if value % d == 0]
        op = rng.choice(list(OPS) if divisors else ["add", "subtract", "multiply"])
        if op == "divide":
            operand = rng.choice(divisors)
        elif op == "multiply":
            operand = rng.randint(2, 9)
        else:
            operand = rng.randint(1, 50)
        value = int(_APPLY[op](value, operand))
        steps.append((op, operand))
    return _phrase(rng, start, steps, value)


def _phrase(rng: random.Random, start: int, steps: list[tuple[str, int]], value: int) -> TaskSpec:
    """Word the chain ``start (op operand)...`` as an expression or as a story, at random."""
    params: dict[str, Any] = {"start": start, "steps": [list(s) for s in steps], "answer": value}
    if rng.random() < 0.5:
        return TaskSpec(f"Compute {_expression(start, steps)}.", params, "expression", len(steps))
    who, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    story = ", then ".join(_WORD[op].format(who=who, n=n) for op, n in steps)
    text = f"{who} has {start} {thing}. Then {story}. How many {thing} does {who} have now?"
    return TaskSpec(text, params, "word", len(steps))


def _expression(start: int, steps: list[tuple[str, int]]) -> str:
    text = str(start)
    for index, (op, operand) in enumerate(steps):
        text = f"{text} {OPS[op]} {operand}"
        if index < len(steps) - 1:
            text = f"({text})"
    return text


def _tools(world: None) -> list[Callable[..., float]]:
    return [add, subtract, multiply, divide]


def _check(task: Task, world: None, answer: str | None) -> Verdict:
    expected = task.params["answer"]
    if answer is None:
        return Verdict.of(False, "no answer was submitted (call finish with the number)")
    submitted = _number(answer)
    if submitted is None:
        return Verdict.of(False, f"the answer {answer!r} is not a number")
    if not math.isfinite(submitted):
        # nan compares false with everything, so a tolerance check alone would pass it.
        return Verdict.of(False, f"the answer {answer.strip()!r} is not a finite number")
    if abs(submitted - expected) > 1e-9:
        return Verdict.of(False, f"submitted {answer.strip()}, which is not the correct value")
    return Verdict.of(True, "correct")


def _solve(task: Task) -> list[ToolCall]:
    value = task.params["start"]
    calls = []
    for op, operand in task.params["steps"]:
        calls.append(ToolCall(op, {"a": value, "b": operand}))
        value = int(_APPLY[op](value, operand))
    return [*calls, ToolCall("finish", {"answer": str(value)})]


def _number(text: object) -> float | None:
    try:
        return float(str(text).strip().rstrip(".").replace(",", ""))
    except ValueError:
        return None


def relabel(trajectory: Trajectory) -> TaskSpec | None:
    """Name the chain of operations a trajectory computed, if it submitted the chain's value.

    Successful tool calls are read in order. A call extends the chain when it takes the
    previous result as its first operand (or as either operand of ``add`` and ``multiply``).
    Only whole numbers count. Every successful operation must belong to the one chain: an
    episode that also computed something unrelated did not solve the chain's task cleanly, and
    learning from it would teach detours.

    Returns:
        A task such as ``"Compute (3 + 4) * 2."`` (or the same chain told as a story) whose
        difficulty is the number of operations, or ``None`` if the trajectory never finished,
        computed no single chain of at most ``max_difficulty`` operations, or submitted
        anything but the chain's final value.
    """
    values: list[int] = []
    steps: list[tuple[str, int]] = []
    answer: float | None = None
    for step in trajectory.steps:
        call = step.call
        if call is None or step.failed:
            continue
        if call.name == "finish":
            answer = _number(call.arguments.get("answer", ""))
            break
        a, b = _number(call.arguments.get("a")), _number(call.arguments.get("b"))
        result = _number(step.observation.text)
        if call.name not in OPS or a is None or b is None or result is None:
            continue
        if not all(x.is_integer() for x in (a, b, result)):
            return None
        if values and a == values[-1]:
            steps.append((call.name, int(b)))
        elif values and b == values[-1] and call.name in ("add", "multiply"):
            steps.append((call.name, int(a)))
        elif values:
            return None  # a second, unrelated computation
        else:
            values, steps = [int(a)], [(call.name, int(b))]
        values.append(int(result))
    if not steps or answer is None or len(steps) > env.max_difficulty:
        return None
    start, value = values[0], values[0]
    for op, operand in steps:
        value = int(_APPLY[op](value, operand))
    if answer != value or value != values[-1]:
        return None
    return _worded(start, steps, value)


def _worded(start: int, steps: list[tuple[str, int]], value: int) -> TaskSpec:
    # Worded like a sampled task (expression or story), chosen by the chain itself so the same
    # chain always gets the same task.
    return _phrase(random.Random(f"{start}:{steps}"), start, steps, value)


PARAMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "start": {"type": "integer", "minimum": 1, "maximum": 999},
        "steps": {
            "type": "array",
            "minItems": 1,
            "maxItems": 5,
            "items": {
                "type": "array",
                "prefixItems": [
                    {"enum": list(OPS)},
                    {"type": "integer", "minimum": 1, "maximum": 99},
                ],
                "items": False,
                "minItems": 2,
                "maxItems": 2,
            },
        },
    },
    "required": ["start", "steps"],
    "additionalProperties": False,
}


def from_params(params: dict[str, Any]) -> TaskSpec:
    """Build the task of a proposed chain ``{"start": 7, "steps": [["add", 5], ...]}``.

    The answer is computed here, never taken from the params.

    Raises:
        ValueError: If the chain is not whole numbers with known operations, divides by zero or
            into a fraction, is longer than the highest difficulty, or grows beyond 10^9.
    """
    start, raw = params.get("start"), params.get("steps")
    if not _whole(start):
        raise ValueError(f"start must be a whole number; got {start!r}")
    if not isinstance(raw, list) or not 1 <= len(raw) <= env.max_difficulty:
        raise ValueError(f"steps must be a list of 1 to {env.max_difficulty} [operation, number]")
    value, steps = int(start), []
    for step in raw:
        if not (isinstance(step, list | tuple) and len(step) == 2 and step[0] in OPS):
            raise ValueError(f"each step must be [operation, number] with one of {list(OPS)}")
        op, operand = step
        if not _whole(operand) or (op == "divide" and (operand == 0 or value % operand)):
            raise ValueError(f"{op} {operand!r} does not keep the chain in whole numbers")
        value = int(_APPLY[op](value, operand))
        if abs(value) > _LIMIT:
            raise ValueError(f"the chain grows beyond {_LIMIT}")
        steps.append((str(op), int(operand)))
    return _worded(int(start), steps, value)


_IDENTITY = {("multiply", 1), ("divide", 1), ("add", 0), ("subtract", 0)}


def problem_key(params: dict[str, Any]) -> str:
    """The chain's canonical params without its identity steps.

    A sampled chain never has one (its operands are 1 and up, and 2 and up for ``*`` and
    ``/``), so its key, and its split, are what the default key gave.
    """
    steps = params.get("steps")
    if not isinstance(steps, list):
        return canonical_key(params)
    kept = [
        step for step in steps if not (isinstance(step, list | tuple) and tuple(step) in _IDENTITY)
    ]
    return canonical_key({**params, "steps": kept})


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _LIMIT


env: SimpleEnv[None] = SimpleEnv(
    name="calc",
    description="Arithmetic word problems solved with add/subtract/multiply/divide tools.",
    sample=_sample,
    build=lambda task: None,
    tools=_tools,
    verify=_check,
    oracle=_solve,
    max_difficulty=5,
    version="2",
    describe=relabel,
    task_from_params=from_params,
    params_schema=PARAMS_SCHEMA,
    problem_key=problem_key,
)
