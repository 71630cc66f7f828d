import itertools

import jsonschema

from ratchet.engine.models.constrain import tool_call_grammar
from ratchet.improve.explore.untried import MAX_ALTERNATIVES, untried_calls


def tool(name, properties, required=None):
    parameters = {"type": "object", "properties": properties}
    parameters["required"] = list(properties) if required is None else required
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


NUMBERS = [7, 8]
DIVIDE = tool("divide", {"a": {"type": "number", "enum": NUMBERS}, "b": {"enum": NUMBERS}})


def accepts(offered, arguments):
    return jsonschema.Draft202012Validator(offered["function"]["parameters"]).is_valid(arguments)


def test_a_tried_call_is_left_out_and_every_other_call_of_its_tool_stays():
    (offered,) = untried_calls([DIVIDE], {"divide": [{"a": 7, "b": 8}]})
    calls = [dict(zip("ab", p, strict=True)) for p in itertools.product(NUMBERS, repeat=2)]
    assert [c for c in calls if accepts(offered, c)] == [
        {"a": 7, "b": 7},
        {"a": 8, "b": 7},
        {"a": 8, "b": 8},
    ]
    assert not accepts(offered, {"a": 7})  # still both arguments
    assert tool_call_grammar([offered])


def test_a_tool_whose_every_call_was_tried_is_left_out_and_others_stay():
    look = tool("look", {})
    tried = {"divide": [{"a": a, "b": b} for a in NUMBERS for b in NUMBERS], "look": [{}]}
    assert untried_calls([DIVIDE, look], tried) == ()
    assert untried_calls([DIVIDE, look], {"look": [{}]}) == (DIVIDE,)


def test_an_optional_argument_left_out_before_may_be_given_now():
    listing = tool("list_files", {"path": {"enum": [".", "logs"]}}, required=[])
    (offered,) = untried_calls([listing], {"list_files": [{}]})
    assert accepts(offered, {"path": "logs"}) and not accepts(offered, {})
    (again,) = untried_calls([listing], {"list_files": [{"path": "."}]})
    assert accepts(again, {}) and accepts(again, {"path": "logs"})
    assert not accepts(again, {"path": "."})


def test_an_argument_that_was_not_copied_is_told_apart_by_the_later_ones_only():
    write = tool("write_file", {"path": {"type": "string"}, "content": {"enum": ["1", "2"]}})
    (offered,) = untried_calls([write], {"write_file": [{"path": "a.txt", "content": "1"}]})
    assert accepts(offered, {"path": "a.txt", "content": "2"})
    assert not accepts(offered, {"path": "a.txt", "content": "1"})
    assert not accepts(offered, {"path": "b.txt", "content": "1"})  # free: not offered


def test_the_options_of_a_chained_tool_each_lose_the_tried_call():
    chained = tool("add", {})
    option = DIVIDE["function"]["parameters"]
    chained["function"]["parameters"] = {"anyOf": [option, {**option, "required": ["a"]}]}
    (offered,) = untried_calls([chained], {"add": [{"a": 7, "b": 8}]})
    assert not accepts(offered, {"a": 7, "b": 8}) and accepts(offered, {"a": 8, "b": 8})


def test_a_tool_split_into_too_many_schemas_is_left_out():
    values = list(range(MAX_ALTERNATIVES + 2))
    wide = tool("pick", {"a": {"enum": values}, "b": {"enum": values}})
    tried = {"pick": [{"a": a, "b": 0} for a in values]}
    assert untried_calls([wide], tried) == ()
