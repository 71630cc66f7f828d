"""Random walks of valid tool calls over a source's world, and what they make of a task.

A *walk* is calls drawn at random and run on a fresh world; a call is valid when it raises
nothing. Its state-changing calls, in order, are the task's oracle, and their number is its
difficulty; a read-only walk of one call becomes a question whose answer is the value read.
:func:`judge_walk` drops a walk that changes nothing or undoes itself (a call whose every
changed cell a later call changes again), and :func:`normalise` gives the walk its canonical
form, which is the problem key: calls that commute are sorted, so two orders of the same
changes are one problem.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ratchet.core.env import format_result
from ratchet.core.tool import Tool, ToolCall, ToolError
from ratchet.core.trajectory import Observation
from ratchet.forge.source import Source
from ratchet.forge.state import Cells, cells, changed, scalars

W = TypeVar("W")

MAX_ANSWER_CHARS = 60
_INTEGERS = range(0, 10)


@dataclass(frozen=True)
class Ran:
    """One call run on a world.

    Attributes:
        call: The call, its arguments validated and coerced.
        result: What the tool returned, as observation text (``None`` if it failed).
        error: Why it failed.
        before: The world's cells before the call.
        after: The world's cells after it.
    """

    call: ToolCall
    result: str | None
    error: str | None
    before: Cells
    after: Cells

    @property
    def changed(self) -> set[str]:
        """The cells the call changed."""
        return changed(self.before, self.after)


class Runner(Generic[W]):
    """A source's fresh world and its tools, running calls and reading the state around each.

    Use as a context manager; the world is closed on exit.
    """

    def __init__(self, source: Source[W], index: int) -> None:
        self.source = source
        self.world = source.open(index)
        try:
            self.tools = {t.name: t for t in as_tools(source.tools(self.world))}
            self.start = cells(source.state(self.world))
        except BaseException:
            self.close()
            raise
        self.now = self.start

    def __enter__(self) -> Runner[W]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the world."""
        if self.source.close is not None:
            self.source.close(self.world)

    def run(self, call: ToolCall) -> Ran:
        """Run one call; failures are recorded, never raised."""
        before = self.now
        tool = self.tools.get(call.name)
        if tool is None:
            return Ran(call, None, f"unknown tool {call.name!r}", before, before)
        try:
            arguments = tool.validate(call.arguments)
            outcome = tool.fn(**arguments)
        except ToolError as exc:
            return Ran(call, None, str(exc), before, self._read())
        except Exception as exc:  # a user's tool failing is an invalid call, not a crash
            return Ran(call, None, f"{type(exc).__name__}: {exc}", before, self._read())
        text = outcome.text if isinstance(outcome, Observation) else format_result(outcome)
        return Ran(ToolCall(call.name, canonical(arguments)), text, None, before, self._read())

    def _read(self) -> Cells:
        self.now = cells(self.source.state(self.world))
        return self.now


def as_tools(tools: Sequence[Callable[..., Any] | Tool]) -> list[Tool]:
    """The source's tools as :class:`Tool` objects."""
    return [t if isinstance(t, Tool) else Tool.from_function(t) for t in tools]


def canonical(arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments as plain JSON values (a coerced enum or tuple becomes what JSON holds)."""
    loaded: dict[str, Any] = json.loads(json.dumps(arguments, default=_plain))
    return loaded


def _plain(value: Any) -> Any:
    return getattr(value, "value", str(value))


def answerable(text: str | None) -> bool:
    """Whether a result can be a question's answer: one short line that is not a structure."""
    if not text or "\n" in text or len(text) > MAX_ANSWER_CHARS:
        return False
    return not text.lstrip().startswith(("{", "["))


class Draw:
    """Draws random arguments for a tool on a world, from the source's values or the schema."""

    def __init__(self, source: Source[Any], world: Any, state: Cells) -> None:
        self.source, self.world = source, world
        self._seen = sorted(scalars(state))
        self._cache: dict[str, list[Any]] = {}

    def arguments(self, rng: random.Random, tool: Tool) -> dict[str, Any]:
        """One random set of arguments for ``tool`` (optional ones half the time)."""
        schema = tool.parameters
        required = set(schema.get("required", []))
        drawn: dict[str, Any] = {}
        for name, spec in schema.get("properties", {}).items():
            if name not in required and rng.random() < 0.5:
                continue
            drawn[name] = self.value(rng, tool.name, name, spec)
        return drawn

    def value(self, rng: random.Random, tool: str, name: str, spec: dict[str, Any]) -> Any:
        """One random value for parameter ``name`` of ``tool``."""
        for key in (f"{tool}.{name}", name):
            if key in self.source.values:
                options = self._values(key)
                if options:
                    return rng.choice(options)
        return self._from_schema(rng, tool, name, _concrete(spec))

    def _values(self, key: str) -> list[Any]:
        if key not in self._cache:
            given = self.source.values[key]
            self._cache[key] = list(given(self.world) if callable(given) else given)
        return self._cache[key]

    def _from_schema(self, rng: random.Random, tool: str, name: str, spec: dict[str, Any]) -> Any:
        if "enum" in spec:
            return rng.choice(spec["enum"])
        if "const" in spec:
            return spec["const"]
        kind = spec.get("type", "string")
        if kind == "boolean":
            return rng.random() < 0.5
        if kind in ("integer", "number"):
            low = int(spec.get("minimum", _INTEGERS.start))
            high = int(spec.get("maximum", max(low, _INTEGERS.stop - 1)))
            return rng.randint(low, min(high, low + 20))
        if kind == "array":
            item = _concrete(spec.get("items", {}))
            count = rng.randint(max(1, int(spec.get("minItems", 1))), 2)
            return [self._from_schema(rng, tool, name, item) for _ in range(count)]
        pattern = spec.get("pattern")
        options = [v for v in self._seen if not pattern or re.search(pattern, v)]
        return rng.choice(options) if options else ""


def _concrete(spec: dict[str, Any]) -> dict[str, Any]:
    """A parameter schema without its optional ``null`` branch (``str | None`` is ``str``)."""
    for key in ("anyOf", "oneOf"):
        branches = [b for b in spec.get(key, []) if b.get("type") != "null"]
        if branches:
            return {**spec, **branches[0]}
    return spec


def mark_lost(steps: Sequence[Ran]) -> int | None:
    """The first call whose every changed cell a later call changes again (else ``None``)."""
    for index, step in enumerate(steps):
        later = set().union(*(s.changed for s in steps[index + 1 :]))
        if step.changed <= later:
            return index
    return None


def judge_walk(steps: Sequence[Ran], start: Cells) -> str | None:
    """Why a walk of state-changing calls makes no task (``None``: it makes one).

    ``"changed nothing"``: the final state is the start; ``"undid itself"``: a call's every
    change was changed again by a later call (a lend then a return, a rename renamed).
    """
    if not steps or not changed(start, steps[-1].after):
        return "changed nothing"
    if mark_lost(steps) is not None:
        return "undid itself"
    return None


def call_dicts(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """Calls as JSON params: ``[{"name": ..., "arguments": {...}}]``."""
    return [{"name": c.name, "arguments": c.arguments} for c in calls]


def calls_of(dicts: Sequence[dict[str, Any]]) -> list[ToolCall]:
    """Calls from their JSON params.

    Raises:
        ValueError: If an entry is not ``{"name": str, "arguments": {...}}``.
    """
    calls = []
    for entry in dicts:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("arguments", {}), dict)
        ):
            raise ValueError(f"a call must be {{'name': str, 'arguments': {{...}}}}; got {entry!r}")
        calls.append(ToolCall(entry["name"], dict(entry.get("arguments", {}))))
    return calls


def replay(source: Source[Any], index: int, calls: Sequence[ToolCall]) -> tuple[list[Ran], Cells]:
    """Run ``calls`` on a fresh world ``index``; returns each call's record and the start."""
    with Runner(source, index) as runner:
        return [runner.run(call) for call in calls], runner.start


def normalise(source: Source[Any], index: int, steps: Sequence[Ran]) -> list[ToolCall]:
    """The walk's canonical calls: sorted when the sorted order gives the same final state."""
    calls = [step.call for step in steps]
    ordered = sorted(calls, key=_call_key)
    if ordered == calls:
        return calls
    replayed, _ = replay(source, index, ordered)
    same = all(r.error is None and r.changed for r in replayed)
    if same and not changed(replayed[-1].after, steps[-1].after):
        return ordered
    return calls


def _call_key(call: ToolCall) -> str:
    return json.dumps([call.name, call.arguments], sort_keys=True)


def problem_key(params: dict[str, Any]) -> str:
    """A forged task's problem key: its normalised walk, whatever world it is played in."""
    walk = {k: params[k] for k in ("calls", "ask") if k in params}
    return json.dumps(walk, sort_keys=True, separators=(",", ":"))
