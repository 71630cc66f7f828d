import json

from ratchet.engine.models.base import Prompt, offered_tools
from ratchet.engine.models.constrain import tool_call_grammar
from ratchet.engine.models.copying import MAX_SPANS, conversation_spans, copy_only

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


def test_a_prompt_with_copy_spans_offers_restricted_tools_that_compile_to_a_grammar():
    prompt = Prompt(MESSAGES, (LOOKUP,), copy_spans=conversation_spans(MESSAGES))
    (offered,) = offered_tools(prompt)
    email = offered["function"]["parameters"]["properties"]["email"]
    assert "fatima.ahmed57@example.com" in email["enum"]
    assert offered_tools(Prompt(MESSAGES, (LOOKUP,))) == (LOOKUP,)
    assert tool_call_grammar([offered], 96, lambda text: len(text) // 3 + 1)
