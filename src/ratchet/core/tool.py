"""Tools: functions the agent calls, each with the JSON schema of its arguments.

Two ways to make one: :meth:`Tool.from_function` reads a typed Python function (schema from
the type hints, descriptions from the Google-style docstring, arguments validated by pydantic);
:meth:`Tool.from_schema` wraps a function behind an existing JSON schema, such as an OpenAI or
MCP tool definition (arguments validated by ``jsonschema``). :func:`bind` fixes a function's
first argument (the world it acts on), so tools can be module-level functions over the world.

Tool authors: bound free-text arguments with ``Annotated[str, Field(max_length=...)]`` where a
long value makes no sense; the ``local`` backend's constrained decoding then cannot run a reply
into its token cap in the middle of a string.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import docstring_parser
import jsonschema
import pydantic


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

    def to_openai(self) -> dict[str, Any]:
        """Return the call as an OpenAI chat ``tool_calls`` entry."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


Validator = Callable[[dict[str, Any]], dict[str, Any]]
"""Checks a call's arguments; returns them coerced, or raises :class:`ToolError`."""


@dataclass(frozen=True)
class Tool:
    """A function the agent can call, with the JSON schema of its arguments.

    Build one with :meth:`from_function` or :meth:`from_schema` rather than by hand.

    Attributes:
        name: The name the agent calls it by.
        description: What it does.
        parameters: JSON schema (``type: object``) of the keyword arguments.
        fn: The function itself, called with the validated arguments as keywords.
        check: Validates arguments against ``parameters``.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    check: Validator

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> Tool:
        """Make a tool from a function with type hints and a Google-style docstring.

        Raises:
            TypeError: If a parameter has no type hint or the function has no docstring.
        """
        tool_name = name or fn.__name__
        description, parameters, model = _spec(fn, tool_name)
        return cls(tool_name, description, parameters, fn, _pydantic_check(tool_name, model))

    @classmethod
    def from_schema(
        cls, name: str, description: str, parameters: dict[str, Any], fn: Callable[..., Any]
    ) -> Tool:
        """Make a tool from an existing JSON schema of its arguments (OpenAI or MCP style).

        Args:
            name: The tool's name.
            description: What it does.
            parameters: JSON schema of the arguments object.
            fn: Called with the validated arguments as keyword arguments.

        Raises:
            ValueError: If ``name`` is empty or ``parameters`` is not a valid object schema.
        """
        if not name:
            raise ValueError("a tool needs a name")
        if parameters.get("type", "object") != "object":
            raise ValueError(f"tool {name!r}: parameters must be a JSON schema of type object")
        try:
            validator = jsonschema.validators.validator_for(parameters)(parameters)
            validator.check_schema(parameters)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"tool {name!r}: invalid JSON schema: {exc.message}") from None
        schema = {"type": "object", "properties": {}, **parameters}

        def check(arguments: dict[str, Any]) -> dict[str, Any]:
            _require_object(name, arguments)
            problems = [
                f"{'.'.join(str(p) for p in error.absolute_path) or '(arguments)'}: {error.message}"
                for error in validator.iter_errors(arguments)
            ]
            if problems:
                raise ToolError(f"bad arguments for {name}: {'; '.join(problems)}")
            return dict(arguments)

        return cls(name, description, schema, fn, check)

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
        """Check arguments against the schema and return them coerced to the declared types.

        Raises:
            ToolError: Naming each bad, missing or unexpected field.
        """
        return self.check(arguments)

    def __call__(self, arguments: dict[str, Any]) -> Any:
        """Validate ``arguments`` and call the function with them."""
        return self.fn(**self.validate(arguments))


_Spec = tuple[str, dict[str, Any], type[pydantic.BaseModel]]
# Building a pydantic model costs about a millisecond, and sessions rebuild the same tools
# (closures, or functions bound by bind(), over a fresh world) every episode. The cache key
# holds everything the spec is made from: the code, the name, and the signature (annotations
# and defaults are evaluated per closure, so two closures of one factory with different
# ``Literal`` choices differ here). A bound function is keyed by the function it binds, so the
# cache does not grow by one entry per episode.
_SPECS: dict[tuple[object, str, str, str], _Spec] = {}


def _spec(fn: Callable[..., Any], tool_name: str) -> _Spec:
    signature = inspect.signature(fn, eval_str=True)
    doc = inspect.getdoc(fn) or ""
    origin = fn.func if isinstance(fn, _Bound) else fn
    key = (getattr(origin, "__code__", origin), tool_name, repr(signature), doc)
    if key not in _SPECS:
        _SPECS[key] = _build_spec(signature, doc, tool_name)
    return _SPECS[key]


def _build_spec(signature: inspect.Signature, docstring: str, tool_name: str) -> _Spec:
    doc = docstring_parser.parse(docstring)
    if not doc.short_description:
        raise TypeError(f"tool {tool_name!r} needs a docstring saying what it does")
    arg_docs = {p.arg_name: p.description or "" for p in doc.params}
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
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


def _pydantic_check(name: str, model: type[pydantic.BaseModel]) -> Validator:
    def check(arguments: dict[str, Any]) -> dict[str, Any]:
        _require_object(name, arguments)
        try:
            parsed = model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {_describe(err)}"
                for err in exc.errors()
            )
            raise ToolError(f"bad arguments for {name}: {problems}") from None
        return {field_name: getattr(parsed, field_name) for field_name in type(parsed).model_fields}

    return check


def _require_object(name: str, arguments: object) -> None:
    if not isinstance(arguments, dict):
        raise ToolError(f"{name}: arguments must be a JSON object, got {arguments!r}")


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


def bind(fn: Callable[..., Any], first: Any) -> Callable[..., Any]:
    """Fix the first argument of a tool function, such as the world it acts on.

    Tools can then be module-level functions over the world, ``def put(store: Store, key: str)``,
    bound per episode in the env's ``tools(world)``, instead of closures written inside it.
    The result publishes the rest of ``fn``: its name, docstring, signature and annotations
    without the first parameter (annotations evaluated, so ``from __future__ import annotations``
    is fine), so :meth:`Tool.from_function` makes the same tool as from a closure without it,
    and :func:`ratchet.envs.choices.closed` can narrow its annotations for this world alone.
    (``functools.partial`` with ``update_wrapper`` cannot: ``inspect.signature`` follows its
    ``__wrapped__`` back to ``fn`` and offers the first parameter again.)

    Args:
        fn: A typed function whose first parameter is positional.
        first: The value of that parameter in every call.

    Returns:
        A callable taking the remaining arguments.

    Raises:
        TypeError: If ``fn`` has no positional first parameter.
    """
    return _Bound(fn, first)


_EMPTY = inspect.Parameter.empty


class _Bound:
    """``fn`` with its first argument fixed; see :func:`bind`."""

    __name__: str
    __qualname__: str

    def __init__(self, fn: Callable[..., Any], first: Any) -> None:
        signature = inspect.signature(fn, eval_str=True)
        parameters = list(signature.parameters.values())
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if not parameters or parameters[0].kind not in positional:
            raise TypeError(f"cannot bind {fn.__qualname__}: it has no positional first parameter")
        rest = parameters[1:]
        self.func = fn
        self.first = first
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__
        self.__annotations__ = {p.name: p.annotation for p in rest if p.annotation is not _EMPTY}
        if signature.return_annotation is not _EMPTY:
            self.__annotations__["return"] = signature.return_annotation
        self._signature = signature.replace(parameters=rest)

    @property
    def __signature__(self) -> inspect.Signature:
        # Read through __annotations__, so narrowing them (as closed() does) narrows the schema.
        parameters = [
            p.replace(annotation=self.__annotations__.get(p.name, p.annotation))
            for p in self._signature.parameters.values()
        ]
        return self._signature.replace(parameters=parameters)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(self.first, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.__qualname__} bound to a {type(self.first).__name__}>"
