import functools
import inspect

import pytest

from ratchet.core import tool as tool_module
from ratchet.core.serialise import from_dict, to_dict
from ratchet.core.tool import Tool, ToolCall, ToolError, bind
from ratchet.envs.choices import closed


def transfer(amount: float, to: str, note: str = "") -> str:
    """Move money to an account.

    Args:
        amount: How much to send.
        to: The receiving account id.
        note: Optional memo.
    """
    return f"sent {amount} to {to}"


def test_schema_comes_from_hints_and_docstring():
    tool = Tool.from_function(transfer)
    schema = tool.schema()
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "transfer"
    assert fn["description"] == "Move money to an account."
    params = fn["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["amount", "to"]
    assert params["properties"]["amount"] == {"type": "number", "description": "How much to send."}
    assert params["properties"]["note"]["default"] == ""
    assert params["additionalProperties"] is False


def test_call_validates_and_coerces():
    tool = Tool.from_function(transfer)
    assert tool({"amount": 3, "to": "acc-1"}) == "sent 3.0 to acc-1"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"to": "x"}, "amount: required field is missing"),
        ({"amount": "lots", "to": "x"}, "amount:"),
        ({"amount": 1, "to": "x", "cc": "y"}, "cc: unexpected field"),
    ],
)
def test_bad_arguments_name_the_field(arguments, field):
    tool = Tool.from_function(transfer)
    with pytest.raises(ToolError, match=field):
        tool.validate(arguments)


def test_non_object_arguments_are_refused():
    with pytest.raises(ToolError, match="must be a JSON object"):
        Tool.from_function(transfer).validate([1, 2])  # type: ignore[arg-type]


def test_functions_without_hints_or_docstring_are_refused():
    def undocumented(x: int) -> int:
        return x

    def unhinted(x):  # type: ignore[no-untyped-def]
        """Do a thing."""

    with pytest.raises(TypeError, match="needs a docstring"):
        Tool.from_function(undocumented)
    with pytest.raises(TypeError, match="no type hint"):
        Tool.from_function(unhinted)


def test_closures_over_different_worlds_keep_their_own_function():
    def make(world: list[str]):
        def remember(item: str) -> int:
            """Store an item.

            Args:
                item: What to store.
            """
            world.append(item)
            return len(world)

        return Tool.from_function(remember)

    first, second = [], []
    make(first)({"item": "a"})
    make(second)({"item": "b"})
    assert first == ["a"] and second == ["b"]


def test_tool_call_round_trips_and_renders_openai():
    call = ToolCall("transfer", {"amount": 1, "to": "x"}, id="call_7")
    assert from_dict(ToolCall, to_dict(call)) == call
    assert call.to_openai() == {
        "id": "call_7",
        "type": "function",
        "function": {"name": "transfer", "arguments": '{"amount": 1, "to": "x"}'},
    }


def test_two_closures_of_one_factory_keep_their_own_name_schema_and_validator():
    def wrap(name: str, kind: type, doc: str):
        def call(value: kind) -> str:  # type: ignore[valid-type]
            return f"{name}({value!r})"

        call.__doc__ = f"{doc}\n\nArgs:\n    value: The value."
        return Tool.from_function(call, name)

    text = wrap("echo", str, "Echo a text.")
    number = wrap("double", int, "Double a number.")
    assert (text.name, text.description) == ("echo", "Echo a text.")
    assert (number.name, number.description) == ("double", "Double a number.")
    assert text.parameters["properties"]["value"]["type"] == "string"
    assert number.parameters["properties"]["value"]["type"] == "integer"
    assert text({"value": "hi"}) == "echo('hi')"
    assert number({"value": 2}) == "double(2)"
    with pytest.raises(ToolError, match="value"):
        text.validate({"value": 3})
    with pytest.raises(ToolError, match="value"):
        number.validate({"value": "three"})


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name."},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
    "additionalProperties": False,
}


def test_from_schema_keeps_the_schema_and_validates_with_it():
    tool = Tool.from_schema(
        "forecast", "Weather forecast.", WEATHER, lambda city, days=1: f"{city}: sun x{days}"
    )
    assert tool.schema()["function"] == {
        "name": "forecast",
        "description": "Weather forecast.",
        "parameters": WEATHER,
    }
    assert tool({"city": "Oslo", "days": 2}) == "Oslo: sun x2"
    with pytest.raises(ToolError, match="days: 9 is greater than the maximum of 7"):
        tool.validate({"city": "Oslo", "days": 9})
    with pytest.raises(ToolError, match="'city' is a required property"):
        tool.validate({})
    with pytest.raises(ToolError, match="must be a JSON object"):
        tool.validate(["Oslo"])  # type: ignore[arg-type]


def test_from_schema_fills_in_missing_properties_and_refuses_bad_schemas():
    bare = Tool.from_schema("ping", "Ping.", {"type": "object"}, lambda: "pong")
    assert bare.parameters == {"type": "object", "properties": {}}
    assert bare({}) == "pong"
    with pytest.raises(ValueError, match="of type object"):
        Tool.from_schema("x", "X.", {"type": "string"}, str)
    with pytest.raises(ValueError, match="invalid JSON schema"):
        Tool.from_schema("x", "X.", {"type": "object", "properties": 3}, str)
    with pytest.raises(ValueError, match="needs a name"):
        Tool.from_schema("", "X.", WEATHER, str)


def deposit(ledger: "list[str]", amount: "float", to: str, note: str = "") -> "str":
    """Move money to an account.

    Args:
        ledger: Where the transfer is written down.
        amount: How much to send.
        to: The receiving account id.
        note: Optional memo.
    """
    ledger.append(f"{amount} to {to}")
    return f"sent {amount} to {to}"


def test_bind_publishes_the_function_without_its_first_parameter():
    ledger: list[str] = []
    bound = bind(deposit, ledger)
    assert (bound.__name__, bound.__doc__) == ("deposit", deposit.__doc__)
    assert list(inspect.signature(bound).parameters) == ["amount", "to", "note"]
    assert bound.__annotations__ == {"amount": float, "to": str, "note": str, "return": str}
    tool = Tool.from_function(bound, "transfer")
    assert tool.schema() == Tool.from_function(transfer).schema()
    assert tool({"amount": 3, "to": "acc-1"}) == "sent 3.0 to acc-1"
    assert ledger == ["3.0 to acc-1"]


def test_partial_with_update_wrapper_shows_the_first_parameter_which_bind_hides():
    wrapped = functools.update_wrapper(functools.partial(deposit, []), deposit)
    assert "ledger" in inspect.signature(wrapped).parameters
    assert "ledger" not in inspect.signature(bind(deposit, [])).parameters


def test_closed_narrows_one_binding_and_leaves_the_function_alone():
    narrowed = closed(bind(deposit, []), to=["acc-1", "acc-2"])
    plain = bind(deposit, [])
    to = Tool.from_function(narrowed).parameters["properties"]["to"]
    assert to["enum"] == ["acc-1", "acc-2"]
    assert "enum" not in Tool.from_function(plain).parameters["properties"]["to"]
    assert deposit.__annotations__["to"] is str
    with pytest.raises(ToolError, match="bad arguments for deposit: to:"):
        Tool.from_function(narrowed).validate({"amount": 1, "to": "acc-3"})


def test_bindings_to_fresh_worlds_share_one_cached_spec():
    Tool.from_function(bind(deposit, []))
    cached = len(tool_module._SPECS)
    for _ in range(3):
        Tool.from_function(bind(deposit, []))
    assert len(tool_module._SPECS) == cached


def test_bind_refuses_a_function_without_a_positional_first_parameter():
    def keyword_only(*, world: list[str]) -> None:
        """Do nothing."""

    def no_parameters() -> None:
        """Do nothing."""

    for fn in (keyword_only, no_parameters):
        with pytest.raises(TypeError, match="no positional first parameter"):
            bind(fn, [])
