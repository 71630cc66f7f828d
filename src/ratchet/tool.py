"""Tools: typed Python functions with a JSON schema made from their hints and docstring."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import docstring_parser
import pydantic

from ratchet.task import check_version


class ToolError(Exception):
    """Raised by a tool to report a problem the agent should see (and can react to)."""


@dataclass(frozen=True)
class ToolCall:
    """One action: the name of a tool and the arguments the agent gave it.

    Attributes:
        name: The tool's name.
        arguments: Keyword arguments, as parsed from the model's JSON.
        id: The call id, as in the OpenAI chat format.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = "call_0"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict with a schema ``version``."""
        return {"version": 1, "id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        """Build a call from :meth:`to_dict` output."""
        check_version(data, "ToolCall")
        return cls(name=data["name"], arguments=dict(data["arguments"]), id=data["id"])

    def to_openai(self) -> dict[str, Any]:
        """Return the call as an OpenAI chat ``tool_calls`` entry."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass(frozen=True)
class Tool:
    """A function the agent can call, with the JSON schema of its arguments.

    Build one with :meth:`from_function` rather than by hand.

    Attributes:
        name: The name the agent calls it by.
        description: What it does, from the first paragraph of the docstring.
        parameters: JSON schema (``type: object``) of the keyword arguments.
        fn: The function itself.
        model: The pydantic model that validates arguments against ``parameters``.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    model: type[pydantic.BaseModel]

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> Tool:
        """Make a tool from a function with type hints and a Google-style docstring.

        Raises:
            TypeError: If a parameter has no type hint or the function has no docstring.
        """
        tool_name = name or fn.__name__
        key = (getattr(fn, "__code__", fn), tool_name, repr(getattr(fn, "__defaults__", None)))
        if key not in _SPECS:
            _SPECS[key] = _spec(fn, tool_name)
        description, parameters, model = _SPECS[key]
        return cls(tool_name, description, parameters, fn, model)

    def schema(self) -> dict[str, Any]:
        """Return the tool in the OpenAI chat ``tools`` format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check arguments against the schema and return them coerced to the hinted types.

        Raises:
            ToolError: Naming each bad, missing or unexpected field.
        """
        if not isinstance(arguments, dict):
            raise ToolError(f"{self.name}: arguments must be a JSON object, got {arguments!r}")
        try:
            parsed = self.model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {_describe(err)}"
                for err in exc.errors()
            )
            raise ToolError(f"bad arguments for {self.name}: {problems}") from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    def __call__(self, arguments: dict[str, Any]) -> Any:
        """Validate ``arguments`` and call the function with them."""
        return self.fn(**self.validate(arguments))


_Spec = tuple[str, dict[str, Any], type[pydantic.BaseModel]]
# Building a pydantic model costs about a millisecond; sessions rebuild the same tools (closures
# over a fresh world) every episode, so specs are cached by the function's code object.
_SPECS: dict[tuple[object, str, str], _Spec] = {}


def _spec(fn: Callable[..., Any], tool_name: str) -> _Spec:
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    if not doc.short_description:
        raise TypeError(f"tool {tool_name!r} needs a docstring saying what it does")
    arg_docs = {p.arg_name: p.description or "" for p in doc.params}
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn, eval_str=True).parameters.values():
        if param.annotation is inspect.Parameter.empty:
            raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} has no type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (
            param.annotation,
            pydantic.Field(default, description=arg_docs.get(param.name) or None),
        )
    model = pydantic.create_model(
        f"{tool_name}_arguments",
        __config__=pydantic.ConfigDict(extra="forbid"),
        **fields,
    )
    description = doc.short_description
    if doc.long_description:
        description += "\n" + doc.long_description
    return description, _clean_schema(model.model_json_schema()), model


def _describe(err: Any) -> str:
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "extra_forbidden":
        return "unexpected field"
    return str(err["msg"])


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's ``title`` keys: they add tokens and tell the model nothing."""
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if isinstance(value, dict):
            cleaned[key] = (
                _clean_schema(value)
                if key != "properties"
                else {prop: _clean_schema(sub) for prop, sub in value.items()}
            )
        elif isinstance(value, list):
            cleaned[key] = [_clean_schema(v) if isinstance(v, dict) else v for v in value]
        else:
            cleaned[key] = value
    cleaned.pop("additionalProperties", None)
    if cleaned.get("type") == "object":
        cleaned["additionalProperties"] = False
    return cleaned


def tools_from(*fns: Callable[..., Any]) -> list[Tool]:
    """Make a list of tools from plain typed functions."""
    return [Tool.from_function(fn) for fn in fns]
