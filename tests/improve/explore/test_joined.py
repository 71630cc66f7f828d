import re

from ratchet.engine.models.constrain import tool_call_grammar
from ratchet.improve.explore.joined import joined_pattern


def test_short_spans_join_up_to_the_count_and_a_long_one_stands_alone():
    sentence = "2024-01-11 11:06:00 ERROR reports: retrying upstream call (code E7960)"
    spans = ["#W12", "$4.50", "a|b [c]", sentence]
    pattern, longest = joined_pattern(spans, 3)
    matches = re.compile(pattern).fullmatch
    for text in ("#W12", "#W12, $4.50", "a|b [c]\n#W12\n$4.50", sentence):
        assert matches(text), text
    for text in (f"#W12, {sentence}", "#W12, $4.50, #W12, #W12", "#W12,$4.50", "a|b", "$4x50"):
        assert not matches(text), text
    assert longest == len(sentence)
    tool = {
        "type": "function",
        "function": {
            "name": "finish",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string", "pattern": pattern}},
                "required": ["answer"],
            },
        },
    }
    assert tool_call_grammar([tool])  # the decoder's own regex dialect reads it


def test_a_single_short_span_is_offered_alone():
    pattern, longest = joined_pattern(["only", "x" * 60], 3)
    assert re.fullmatch(pattern, "only") and not re.fullmatch(pattern, "only, only")
    assert longest == 60
