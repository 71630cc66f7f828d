import json

import jsonschema

from ratchet.engine.models.base import Prompt
from ratchet.engine.models.constrain import tool_call_grammar
from ratchet.improve.explore.copying import (
    MAX_SPANS,
    chain_on,
    conversation_spans,
    copy_only,
    result_spans,
    uses_left,
)
from ratchet.improve.explore.strategies import POLICY, Strategy, Track, reply_tools

COPY = Strategy("copy", copy_arguments=True)
CHAIN = Strategy("chain", copy_arguments=True, chain=True)

MESSAGES = (
    {"role": "system", "content": "You solve tasks by calling tools."},
    {
        "role": "user",
        "content": "Hi, this is Fatima Ahmed (fatima.ahmed57@example.com). Please ship my "
        "pending order #W3372338 to 608 Station Rd Apt 13, Boise, ID 83702 instead.",
    },
    {"role": "assistant", "content": None},
    {"role": "tool", "content": json.dumps({"customer_id": "fatima_ahmed_5712", "credit": 42})},
)
LOOKUP = {
    "type": "function",
    "function": {
        "name": "find_customer_by_email",
        "parameters": {
            "type": "object",
            "properties": {
                "email": {"type": "string"},
                "kind": {"type": "string", "enum": ["a", "b"]},
                "limit": {"type": "integer"},
                "ids": {"type": "array", "items": {"type": "string"}},
                "address": {"type": "object", "properties": {"zip": {"type": "string"}}},
            },
            "required": ["email"],
        },
    },
}


def test_spans_are_the_words_phrases_and_values_of_the_task_and_tool_results():
    spans = conversation_spans(MESSAGES)
    for expected in (
        "fatima.ahmed57@example.com",
        "#W3372338",
        "W3372338",
        "608 Station Rd Apt 13",
        "Boise",
        "83702",
        "fatima_ahmed_5712",
        "42",
    ):
        assert expected in spans
    assert "tools" not in spans  # the system prompt is instructions, not data
    short = ({"role": "tool", "content": "Identity confirmed: customer_id ana_li_1234"},)
    assert "Identity confirmed: customer_id ana_li_1234" in conversation_spans(short)
    assert len(spans) == len(set(spans))
    many = ({"role": "user", "content": " ".join(f"w{i}" for i in range(2 * MAX_SPANS))},)
    assert len(conversation_spans(many)) == MAX_SPANS


def test_a_word_that_joins_fields_gives_each_field_as_a_span():
    # A CSV row, a search hit (path:line:), and a setting: their fields are what a task asks
    # for, and a word split only at spaces never offers them.
    result = "id,name,city\n4,Elif,Nairobi\nlogs/app-2024-01-11.log:7: ERROR (code E7960)"
    spans = conversation_spans(
        ({"role": "tool", "content": result}, {"role": "user", "content": "port=8305"})
    )
    for expected in ("Elif", "Nairobi", "logs/app-2024-01-11.log", "8305", "4,Elif,Nairobi"):
        assert expected in spans
    assert "" not in spans and len(spans) == len(set(spans))


def test_copy_only_restricts_free_arguments_at_every_depth_and_narrows_enums_to_mentions():
    (tool,) = copy_only([LOOKUP], ["a@b.c", "7", "x y"])
    properties = tool["function"]["parameters"]["properties"]
    assert properties["email"]["enum"] == ["a@b.c", "7", "x y"]
    assert properties["kind"]["enum"] == ["a", "b"]  # neither mentioned: the whole enum
    (narrowed,) = copy_only([LOOKUP], ["b", "7"])
    assert narrowed["function"]["parameters"]["properties"]["kind"]["enum"] == ["b"]
    assert properties["limit"]["enum"] == [7]
    assert properties["ids"]["items"]["enum"] == ["a@b.c", "7", "x y"]
    assert properties["address"]["properties"]["zip"]["enum"] == ["a@b.c", "7", "x y"]
    assert "enum" not in LOOKUP["function"]["parameters"]["properties"]["email"]  # a copy
    (free,) = copy_only([LOOKUP], ["no number"])
    assert "enum" not in free["function"]["parameters"]["properties"]["limit"]


def test_a_copying_strategy_offers_restricted_tools_that_compile_to_a_grammar():
    prompt = Prompt(MESSAGES, (LOOKUP,))
    (offered,) = reply_tools(COPY, prompt, Track())
    email = offered["function"]["parameters"]["properties"]["email"]
    assert "fatima.ahmed57@example.com" in email["enum"]
    assert reply_tools(POLICY, prompt, Track()) is None
    assert tool_call_grammar([offered], 96, lambda text: len(text) // 3 + 1)


CALC = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
    for name in ("add", "subtract")
] + [
    {"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}},
    {
        "type": "function",
        "function": {
            "name": "finish",
            "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}},
        },
    },
]
STEPPED = (
    {"role": "user", "content": "Compute (49 * 8) - 12."},
    {"role": "assistant", "content": None},
    {"role": "tool", "content": "392"},
)


def test_the_latest_result_gives_spans_only_when_it_succeeded():
    assert result_spans(STEPPED) == ("392",)
    assert result_spans(STEPPED[:1]) is None  # no result yet
    failed = (*STEPPED[:2], {"role": "tool", "content": "Error: division by zero"})
    assert result_spans(failed) is None


def test_a_chained_call_takes_one_argument_from_the_latest_result():
    restricted = copy_only(CALC, conversation_spans(STEPPED))
    add, subtract, finish = chain_on(restricted, result_spans(STEPPED) or ())
    options = add["function"]["parameters"]["anyOf"]
    assert [o["properties"]["a"]["enum"] for o in options] == [[392], [49, 8, 12, 392]]
    assert [o["properties"]["b"]["enum"] for o in options] == [[49, 8, 12, 392], [392]]
    assert finish["function"]["parameters"]["properties"]["answer"]["enum"] == ["392"]
    assert finish["function"]["parameters"]["required"] == ["answer"]
    assert "look" not in {t["function"]["name"] for t in (add, subtract, finish)}
    assert tool_call_grammar([add, subtract, finish], 96, lambda text: len(text) // 3 + 1)
    # A result no argument can take leaves the tools as they were.
    assert chain_on(restricted, ["nothing useful"]) == restricted


def test_a_value_is_spent_once_passed_as_often_as_the_conversation_mentions_it():
    def numbers(messages, spent):
        return [span for span in uses_left(messages, spent) if span.isdigit()]

    assert numbers(STEPPED, []) == ["49", "8", "12", "392"]
    assert numbers(STEPPED, [49, 8.0]) == ["12", "392"]
    # A result equal to a value already passed is a new mention; so is a number given twice.
    equal = (*STEPPED[:2], {"role": "tool", "content": "49"})
    assert numbers(equal, [49, 8]) == ["49", "12"]
    twice = ({"role": "user", "content": "Compute ((19 * 8) + 7) * 7."},)
    assert uses_left(twice, [])["7"] == 2 and uses_left(twice, [7])["7"] == 1
    assert "7" not in uses_left(twice, [7, 7])
    assert "Compute" not in uses_left(STEPPED, ["Compute"])
    assert uses_left(STEPPED, [True]) == uses_left(STEPPED, [])  # a boolean is not 1
    assert tuple(uses_left(STEPPED, [])) == conversation_spans(STEPPED)
    restricted = copy_only(CALC, tuple(uses_left(STEPPED, [49, 8])))
    subtract = chain_on(restricted, ["392"])[1]
    options = subtract["function"]["parameters"]["anyOf"]
    assert [o["properties"]["b"]["enum"] for o in options] == [[12, 392], [392]]


def test_a_result_left_once_is_taken_up_by_one_argument_only():
    # subtract(3, 26) -> -23: without within-call spending the next call could be
    # subtract(-23, -23), the result passed as both operands.
    messages = (
        {"role": "user", "content": "Compute (3 - 26) * 4."},
        {"role": "assistant", "content": None},
        {"role": "tool", "content": "-23"},
    )
    left = uses_left(messages, [3, 26])
    once = tuple(span for span, uses in left.items() if uses == 1)
    assert "-23" in once and "4" in once
    add, subtract, finish = chain_on(copy_only(CALC, tuple(left)), ("-23",), once)
    options = subtract["function"]["parameters"]["anyOf"]
    pairs = [(o["properties"]["a"]["enum"], o["properties"]["b"]["enum"]) for o in options]
    assert pairs == [([-23], [4]), ([4], [-23])]
    assert finish["function"]["parameters"]["properties"]["answer"]["enum"] == ["-23"]
    assert tool_call_grammar([add, subtract, finish], 96, lambda text: len(text) // 3 + 1)
    # Mentioned twice, the result may fill both operands.
    again = (*messages[:2], {"role": "tool", "content": "-23 (that is, -23)"})
    spans = tuple(uses_left(again, [3, 26]))
    subtract = chain_on(copy_only(CALC, spans), ["-23"], once=())[1]
    options = subtract["function"]["parameters"]["anyOf"]
    assert options[0]["properties"]["b"]["enum"] == [4, -23]


def test_a_value_left_once_that_would_leave_a_required_argument_empty_gets_no_alternative():
    # The result is the only number left: no call can take it in one operand and not the
    # other, so only finish can take it up.
    lone = copy_only(CALC, ["5"])
    assert [t["function"]["name"] for t in chain_on(lone, ["5"], once=["5"])] == ["finish"]
    optional = {
        "type": "function",
        "function": {
            "name": "note",
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "enum": ["5", "x"]},
                    "tag": {"type": "string", "enum": ["5"]},
                },
                "required": ["text"],
            },
        },
    }
    (chained,) = chain_on([optional], ["5"], once=["5"])
    text_takes, tag_takes = chained["function"]["parameters"]["anyOf"]
    assert "tag" not in text_takes["properties"]  # an optional argument left empty is dropped
    assert tag_takes["properties"]["text"]["enum"] == ["x"]


def test_many_values_left_once_share_alternatives_so_the_grammar_stays_bounded():
    many = [str(n) for n in range(20)]
    restricted = copy_only(CALC, many)
    add = chain_on(restricted, many, once=many)[0]
    options = add["function"]["parameters"]["anyOf"]
    assert len(options) == 2  # one per argument, as without once
    assert options[0]["properties"]["b"]["enum"] == list(range(20))


def test_a_chaining_strategy_offers_only_chained_calls():
    prompt = Prompt(STEPPED, tuple(CALC))
    chained = reply_tools(CHAIN, prompt, Track())
    assert [t["function"]["name"] for t in chained] == ["add", "subtract", "finish"]
    unchained = Strategy("x", chain=True)  # chaining applies with copying only
    assert reply_tools(unchained, prompt, Track()) is None


def test_closed_values_are_taken_up_when_the_result_mentions_them_as_words():
    def tool(name, item):
        return {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "properties": {"item": item}},
            },
        }

    use = tool("use", {"type": "string", "enum": ["brass key", "iron key"]})
    take = tool("take", {"type": "string", "const": "clay"})
    latest = conversation_spans(({"role": "tool", "content": "You pick up the brass key."},))
    assert "brass key" not in latest  # no span is exactly the item's name
    (chained,) = chain_on([use, take], latest)
    assert chained["function"]["parameters"]["properties"]["item"]["enum"] == ["brass key"]
    assert chained["function"]["parameters"]["required"] == ["item"]
    walked = conversation_spans(({"role": "tool", "content": "You see: clay. Doors: west."},))
    (taken,) = chain_on([use, take], walked)
    assert taken["function"]["name"] == "take"  # a const the result names is taken up


ORDER_ID = {"type": "string", "pattern": "^#?W\\d{7}$"}
CANCEL = {
    "type": "function",
    "function": {
        "name": "cancel_order",
        "parameters": {
            "type": "object",
            "properties": {"order_id": ORDER_ID, "note": {"type": "string", "maxLength": 4}},
            "required": ["order_id"],
        },
    },
}
GET = {
    "type": "function",
    "function": {
        "name": "get_order",
        "parameters": {
            "type": "object",
            "properties": {"order_id": ORDER_ID, "track": {"type": "string", "minLength": 99}},
            "required": ["order_id"],
        },
    },
}


def test_copy_only_offers_only_the_spans_a_property_accepts():
    (tool,) = copy_only([CANCEL], ["Please cancel", "#W3372338", "W3372338", "ok"])
    properties = tool["function"]["parameters"]["properties"]
    assert properties["order_id"]["enum"] == ["#W3372338", "W3372338"]
    assert properties["note"]["enum"] == ["ok"]
    tools = copy_only([GET], ["#W3372338", "ok"])
    (track,) = tools
    assert "track" not in track["function"]["parameters"]["properties"]  # optional, uncopyable


def test_a_tool_whose_required_argument_cannot_be_copied_is_left_out():
    offered = copy_only([CANCEL, LOOKUP], ["fatima.ahmed57@example.com", "Please cancel"])
    assert [tool["function"]["name"] for tool in offered] == ["find_customer_by_email"]


def test_a_lone_uncopyable_tool_keeps_that_argument_free_so_its_call_can_be_decoded():
    (drawn,) = copy_only((CANCEL,), ("Please cancel", "ok"))
    properties = drawn["function"]["parameters"]["properties"]
    assert properties["order_id"] == ORDER_ID  # free: no span is an order id
    assert properties["note"]["enum"] == ["ok"]  # still copied
    assert tool_call_grammar([drawn], 96, lambda text: len(text) // 3 + 1)


def test_a_listing_copy_joins_up_to_its_count_of_spans_and_keeps_other_constraints():
    finish = {
        "type": "function",
        "function": {
            "name": "finish",
            "parameters": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string"},
                    "order": {"type": "string", "pattern": "^#W[0-9]+$"},
                    "count": {"type": "integer"},
                },
                "required": ["answer"],
            },
        },
    }
    spans = ["orders_59", "mailer 17", "#W12", "a.b (c)|d", "7"]
    (tool,) = copy_only([finish], spans, joins=3)
    parameters = tool["function"]["parameters"]
    validator = jsonschema.Draft202012Validator(parameters)
    for answer in ("orders_59", "orders_59, mailer 17", "#W12\na.b (c)|d\n7", "a.b (c)|d"):
        assert validator.is_valid({"answer": answer}), answer
    for answer in ("orders_59, mailer 17, #W12, 7", "orders_59,mailer 17", "a.b", "orders_59, "):
        assert not validator.is_valid({"answer": answer}), answer
    assert parameters["properties"]["order"]["enum"] == ["#W12"]  # its own pattern: one span
    assert parameters["properties"]["count"]["enum"] == [7]
    longest = len("a.b (c)|d") + len("orders_59") + len("mailer 17") + 2 * 2
    assert parameters["properties"]["answer"]["maxLength"] == longest
    assert tool_call_grammar([tool])  # the decoder's regex dialect takes it too
    (single,) = copy_only([finish], spans)
    assert single["function"]["parameters"]["properties"]["answer"]["enum"] == spans
