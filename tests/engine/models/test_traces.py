"""Training examples from recorded token ids (token-faithful traffic)."""

from fakes import CharTokenizer
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation, Step, TokenTrace, Trajectory
from ratchet.engine.models.lora import learnable, traced_examples

TASK = Task(id="t", env="calc", instruction="x", split="train", problem="served:t")


def step(prompt, completion, model="local", given=False, error=None):
    trace = TokenTrace(model, tuple(prompt), tuple(completion))
    observation = Observation("ok", error=error)
    return Step(ToolCall("add", {}), observation, tokens=None if given else trace, given=given)


def episode(*steps):
    return Trajectory(TASK, "v1", "served", (), steps=steps)


def test_turns_whose_prompt_continues_the_sequence_share_one_example():
    chained = episode(step([1, 2], [3, 4]), step([1, 2, 3, 4, 5], [6, 7]))
    [example] = traced_examples(chained, "local", 100)
    assert example.input_ids == [1, 2, 3, 4, 5, 6, 7]
    assert example.assistant_masks == [0, 0, 1, 1, 0, 1, 1]
    assert example.pattern == "add,add"


def test_a_turn_read_from_a_fresh_tokenisation_starts_its_own_example():
    drifted = episode(step([1, 2], [3, 4]), step([1, 2, 9, 4, 5], [6]))
    first, second = traced_examples(drifted, "local", 100)
    assert first.input_ids == [1, 2, 3, 4] and second.input_ids == [1, 2, 9, 4, 5, 6]
    assert second.assistant_masks == [0, 0, 0, 0, 0, 1]
    assert [len(e.input_ids) for e in traced_examples(drifted, "local", 5)] == [4]  # too long


def test_given_and_failed_turns_are_context_and_untraced_episodes_fall_back_to_text():
    mixed = episode(step([1], [2], given=True), step([1, 2, 5], [6]))
    [example] = traced_examples(mixed, "local", 100)
    assert example.assistant_masks == [0, 0, 0, 1]
    assert not learnable(mixed.steps[0]) and not learnable(mixed.steps[0], failed=True)
    failed = step([1], [2], error="bad arguments")
    assert not learnable(failed) and learnable(failed, failed=True)
    assert traced_examples(episode(step([1], [2], model="local:other")), "local", 100) is None
    assert traced_examples(episode(Step(ToolCall("add", {}), Observation(""))), "local", 9) is None


def test_sft_trains_on_recorded_ids_where_present_and_on_text_elsewhere(monkeypatch, tmp_path):
    import ratchet.engine.models.checkpoints as checkpoints
    import ratchet.engine.models.training as training
    from ratchet.core.trajectory import assistant_message
    from ratchet.engine.models.base import LoraSettings

    trained = []
    monkeypatch.setattr(checkpoints, "load", lambda path: (object(), CharTokenizer()))
    monkeypatch.setattr(
        training, "train_lora", lambda model, tok, examples, *rest: trained.extend(examples) or []
    )
    call = ToolCall("add", {"a": 1})
    text = Trajectory(
        TASK,
        "v1",
        "calc",
        ({"role": "user", "content": "x"}, assistant_message(call)),
        steps=(Step(call, Observation("1")),),
    )
    traced = episode(step([1, 2], [3, 4]))
    training.LocalTrainer().sft([traced, text], tmp_path, LoraSettings(steps=1))
    assert trained[0].input_ids == [1, 2, 3, 4]
    assert '{"name": "add"' in "".join(chr(i) for i in trained[1].input_ids)
    trained.clear()
    training.LocalTrainer("elsewhere").sft([traced], tmp_path, LoraSettings(steps=1))
    assert trained == []  # another model's ids, and no text to fall back on


def test_demonstrations_put_before_the_task_send_training_to_the_text():
    from dataclasses import replace

    from ratchet.core.trajectory import generated_turns

    traced = episode(step([1, 2], [3, 4]))
    demo = {"role": "assistant", "content": "x", "demonstration": True}
    shown = replace(traced, messages=(demo, {"role": "assistant", "content": "y"}))
    assert traced_examples(shown, "local", 100) is None
    assert generated_turns(shown) == [False, True]
