"""The local backend's per-request decoding plug-ins, on small tensors (no model)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("llguidance")

from ratchet.engine.cancel import abandoned_rows, watching  # noqa: E402
from ratchet.engine.models.constrain import reply_grammar  # noqa: E402
from ratchet.engine.models.decoding import (  # noqa: E402
    AbandonedRows,
    RowSampler,
    TokenLogprobs,
    nucleus,
    openai_logprobs,
)


def test_nucleus_keeps_the_likeliest_tokens_up_to_top_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.9, 0.03, 0.02]])
    kept = nucleus(probs, 0.75)
    assert kept[0].tolist() == pytest.approx([0.5, 0.3, 0.0, 0.0])
    assert kept[1].tolist() == pytest.approx([0.0, 0.9, 0.0, 0.0])  # the best is always kept
    assert torch.equal(nucleus(probs, 1.0), probs)


def test_row_sampler_with_top_p_never_draws_outside_the_nucleus():
    scores = torch.tensor([[3.0, 2.9, 0.0, -1.0]])
    ids = torch.zeros(1, 1, dtype=torch.long)
    wide = RowSampler([(1.0, 1)])
    narrow = RowSampler([(1.0, 1)], top_p=0.6)
    drawn_wide = {int(wide(ids, scores.clone()).argmax()) for _ in range(300)}
    drawn_narrow = {int(narrow(ids, scores.clone()).argmax()) for _ in range(300)}
    assert drawn_narrow == {0, 1} and drawn_wide > drawn_narrow


def test_token_logprobs_records_each_taken_tokens_logprob_before_any_mask():
    recorder = TokenLogprobs(top=2)
    steps = [torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 5.0]])] * 3
    taken = [torch.tensor([0, 2]), torch.tensor([1, 2]), torch.tensor([0, 0])]
    ids = torch.zeros(2, 1, dtype=torch.long)
    for step, scores in enumerate(steps):
        if step:
            ids = torch.cat([ids, taken[step - 1].unsqueeze(1)], dim=1)
        assert recorder(ids, scores) is scores  # it only watches
    recorder.finish(taken[-1])
    expected = torch.log_softmax(steps[0], dim=-1)
    assert recorder.logprobs(0, 3) == pytest.approx(
        [float(expected[0, 0]), float(expected[0, 1]), float(expected[0, 0])]
    )
    assert recorder.logprobs(1, 2) == pytest.approx([float(expected[1, 2])] * 2)
    [first, _] = recorder.alternatives(1, 2)
    assert [token for token, _ in first] == [2, 0]


def test_openai_logprobs_gives_text_bytes_and_alternatives_per_token():
    vocabulary = {1: "Hi", 2: " th", 3: "ere"}

    def decode(batches):
        return [vocabulary[batch[0]] for batch in batches]

    entries = openai_logprobs([1, 2], [-0.1, -0.2], [[(1, -0.1), (3, -2.0)], []], decode)
    assert [e["token"] for e in entries] == ["Hi", " th"]
    assert entries[0]["bytes"] == list(b"Hi") and entries[1]["logprob"] == -0.2
    assert [t["token"] for t in entries[0]["top_logprobs"]] == ["Hi", "ere"]
    assert entries[1]["top_logprobs"] == []


def test_abandoned_rows_stop_only_the_rows_whose_asker_left():
    gone = {0: False, 1: True}
    checks = [lambda: gone[0], lambda: gone[1]]
    assert abandoned_rows([0, 1]) is None  # nobody watches outside a call
    with watching(checks):
        stop = AbandonedRows(abandoned_rows([1, 0]))
        assert stop(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 5)).tolist() == [
            True,
            False,
        ]


def test_a_reply_schema_compiles_to_a_grammar_and_a_bad_one_is_a_clear_error():
    grammar = reply_grammar({"type": "object", "properties": {"x": {"type": "integer"}}})
    assert isinstance(grammar, str) and grammar
    with pytest.raises(ValueError, match="reply schema"):
        reply_grammar({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})
