import json

import pytest

from ratchet.core.agent import Agent
from ratchet.engine.export import chat_record, to_dataset
from ratchet.engine.harness import replay
from ratchet.engine.models.render import format_call
from ratchet.engine.tokens import load_tokenizer, token_ids
from ratchet.envs.calc import env


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("transformers")
    try:
        return load_tokenizer("local")
    except ValueError as exc:
        pytest.skip(f"no embedded tokenizer: {exc}")


@pytest.fixture(scope="module")
def solved():
    task = env.tasks("train", 1, seed=4)[0]
    return replay(env, task, env.oracle(task), Agent(version="oracle"))


def test_token_ids_cover_the_conversation_and_mask_only_what_the_model_said(tokenizer, solved):
    ids, mask = token_ids(solved, tokenizer)
    assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
    assert solved.task.instruction in tokenizer.decode(ids)
    generated = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    calls = [format_call(step.call) for step in solved.steps]
    assert generated.replace("<|im_end|>", "").split() == " ".join(calls).split()


def test_exports_carry_token_ids_where_the_tokenizer_is_known(tokenizer, solved):
    record = chat_record(solved, include_record=False, tokenizer=tokenizer)
    assert (record["input_ids"], record["token_loss_mask"]) == tuple(
        map(list, token_ids(solved, tokenizer))
    )
    assert "input_ids" not in chat_record(solved, include_record=False)
    pytest.importorskip("datasets")
    row = to_dataset([solved], tokenizer=tokenizer)[0]
    assert row["input_ids"] == record["input_ids"] and sum(row["token_loss_mask"]) > 0
    json.dumps(record)


def test_a_missing_tokenizer_is_a_clear_error(tmp_path):
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="no tokenizer at"):
        load_tokenizer(str(tmp_path / "nothing"))


def test_a_turn_a_client_wrote_is_context_in_the_token_mask(tokenizer, solved):
    from dataclasses import replace

    served = replace(solved, steps=(replace(solved.steps[0], given=True), *solved.steps[1:]))
    ids, mask = token_ids(served, tokenizer)
    generated = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    calls = [format_call(step.call) for step in solved.steps[1:]]
    assert generated.replace("<|im_end|>", "").split() == " ".join(calls).split()
