"""Any Ratchet env as a TRL ``environment_factory`` class, so TRL's GRPO can train on it.

TRL's ``GRPOTrainer(environment_factory=cls)`` makes instances of ``cls`` and, per rollout,
calls ``reset(**row)`` (the dataset row's columns other than ``prompt``; a returned string is
appended to the prompt), exposes every other public method as a tool (schema from its type
hints and Google-style docstring, via ``transformers.get_json_schema``), and calls
``get_reward()`` once the rollout is over. :func:`environment_factory` builds such a class
from an env: one method per tool of the env's sessions (``finish`` included), each running a
step of the instance's current session; ``reset`` starts a session for the row's ``task`` (a
task record from :func:`trl_dataset`) or, with no row, for the next task drawn from ``split``;
``get_reward`` is the verifier's score of the world the rollout left.

The tools are read from one session of the env's first task of ``split``, so every task must
offer the same tools (true of ``SimpleEnv``-made envs).

What TRL's schema of a tool keeps: the argument types (an ``enum`` as a ``Literal``, so it
stays an ``enum``; an array's item type), which arguments are required, and the descriptions.
JSON-schema keywords that a type hint cannot carry are stated in the argument's description
instead (see :data:`STATED`): ``pattern``, ``default``, numeric bounds, string and array
lengths, ``format``, and the same keywords on an array's items. So the model reads them as text
and nothing enforces them while it decodes; a call that breaks one is refused by the session
with a ``bad arguments`` error, as in Ratchet's own harness. Lost entirely: the inner structure
of an object argument (its ``properties`` and ``required``; TRL sees ``dict``), ``anyOf`` and
``oneOf`` other than a nullable type, and ``additionalProperties``.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from ratchet.core.env import Env
from ratchet.core.serialise import from_json, to_json
from ratchet.core.task import Split, Task
from ratchet.core.tool import ToolCall

if TYPE_CHECKING:
    from datasets import Dataset

RESERVED = ("reset", "get_reward")
STATED: dict[str, str] = {
    "pattern": "Must match the regular expression {}.",
    "format": "Format: {}.",
    "minimum": "At least {}.",
    "maximum": "At most {}.",
    "exclusiveMinimum": "Greater than {}.",
    "exclusiveMaximum": "Less than {}.",
    "minLength": "At least {} characters.",
    "maxLength": "At most {} characters.",
    "minItems": "At least {} items.",
    "maxItems": "At most {} items.",
    "default": "Default: {}.",
}
"""JSON-schema keywords a type hint cannot carry, and the sentence that states each in the
argument's description (where TRL's schema keeps it as text)."""
_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def environment_factory(env: Env, *, split: Split = "train", seed: int = 0) -> type:
    """Return a class for ``GRPOTrainer(environment_factory=...)`` that plays ``env``.

    Args:
        env: The env.
        split: Where ``reset()`` without a row draws tasks from.
        seed: Seed of those draws.

    Raises:
        ValueError: If a tool is named ``reset`` or ``get_reward`` or starts with ``_``.
    """
    probe = env.session(env.tasks(split, 1, seed=seed)[0])
    try:
        schemas = probe.reset().tools
    finally:
        probe.close()
    methods: dict[str, Any] = {}
    for schema in schemas:
        function = schema["function"]
        name = function["name"]
        if name in RESERVED or name.startswith("_"):
            raise ValueError(f"tool {name!r} clashes with TRL's environment methods")
        methods[name] = _method(name, function.get("description", name), function["parameters"])
    draws = itertools.count()

    def __init__(self: Any) -> None:
        self._session = None
        self.task = None

    def reset(self: Any, task: str | None = None, **row: Any) -> str:
        """Start an episode: the row's task, or the next one drawn from the split."""
        if self._session is not None:
            self._session.close()
        self.task = from_json(Task, task) if task else env.tasks(split, 1, seed + next(draws))[0]
        self._session = env.session(self.task)
        text: str = self._session.reset().text
        return text

    def get_reward(self: Any) -> float:
        """The verifier's score of the world the episode left (0 if none was played)."""
        if self._session is None:
            return 0.0
        score: float = self._session.verify().score
        return score

    def _step(self: Any, name: str, arguments: dict[str, Any]) -> str:
        if self._session is None:
            return "Error: the episode has not started"
        observation = self._session.step(ToolCall(name, arguments))
        text: str = observation.text
        return text

    namespace = {
        "__init__": __init__,
        "reset": reset,
        "get_reward": get_reward,
        "_step": _step,
        "__doc__": f"The Ratchet env {env.name!r} as a TRL environment.",
        **methods,
    }
    return type(f"{_class_name(env.name)}Environment", (), namespace)


def trl_dataset(env: Env, split: Split, n: int, seed: int = 0) -> Dataset:
    """Return a ``datasets.Dataset`` of ``n`` tasks for :func:`environment_factory`'s class.

    Each row has an empty user ``prompt`` (``reset`` supplies the task text, so the world's
    first observation is included) and the ``task`` record as JSON.
    """
    from datasets import Dataset

    tasks = env.tasks(split, n, seed=seed)
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": ""}] for _ in tasks],
            "task": [to_json(task) for task in tasks],
        }
    )


def _method(name: str, description: str, parameters: dict[str, Any]) -> Callable[..., str]:
    """A method with the tool's signature and docstring that runs the tool in the session."""
    required = set(parameters.get("required", []))
    properties: dict[str, Any] = parameters.get("properties", {})
    ordered = sorted(properties, key=lambda p: p not in required)  # required ones first
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    lines = [description.strip() or name, "", "Args:"]
    for parameter in ordered:
        schema = properties[parameter]
        kind = _python_type(schema)
        optional = parameter not in required
        annotations[parameter] = kind | None if optional else kind
        signature.append(
            inspect.Parameter(
                parameter,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=annotations[parameter],
                default=None if optional else inspect.Parameter.empty,
            )
        )
        lines.append(f"    {parameter}: {_described(parameter, schema)}")

    def tool(self: Any, **arguments: Any) -> str:
        given = {k: v for k, v in arguments.items() if v is not None or k in required}
        result: str = self._step(name, given)
        return result

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = "\n".join(lines if ordered else lines[:1])
    tool.__annotations__ = annotations
    tool.__signature__ = inspect.Signature(signature, return_annotation=str)  # type: ignore[attr-defined]
    return tool


def _described(parameter: str, schema: dict[str, Any]) -> str:
    """The argument's description with the constraints TRL's schema cannot hold (one line)."""
    parts = [str(schema.get("description") or parameter), *_constraints(schema)]
    items = schema.get("items")
    if isinstance(items, dict) and (stated := _constraints(items)):
        parts.append("Each item: " + " ".join(stated))
    return " ".join(" ".join(parts).split())


def _constraints(schema: dict[str, Any]) -> list[str]:
    # A pattern or format reads best bare; a default as JSON, so "." and 1 stay apart.
    return [
        STATED[key].format(value if key in ("pattern", "format") else json.dumps(value))
        for key, value in schema.items()
        if key in STATED
    ]


def _python_type(schema: dict[str, Any]) -> Any:
    if schema.get("enum"):
        return Literal[tuple(schema["enum"])]
    kind = _TYPES.get(schema.get("type", "string"), str)
    if kind is list and isinstance(schema.get("items"), dict):
        return list[_python_type(schema["items"])]  # type: ignore[misc]
    return kind


def _class_name(name: str) -> str:
    return "".join(
        part.capitalize() for part in name.replace("/", "_").replace("-", "_").split("_")
    )
