"""DPO and GRPO training on a tiny random model: what the losses do to the policy."""

import math
from dataclasses import replace

import pytest

from fakes import CharTokenizer, WatchedProgress
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation, Step, Trajectory, assistant_message, tool_message
from ratchet.engine.models.base import LoraSettings, Preference, Scored
from ratchet.engine.models.lora import Example
from ratchet.engine.models.preference import (
    DPO,
    PairExample,
    ScoredExample,
    pair_example,
    pair_or_anchor_example,
    scored_example,
    token_logps,
    train_dpo,
    train_grpo,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 128


def tiny_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
    )
    return transformers.LlamaForCausalLM(config)


def call(name, **arguments):
    return ToolCall(name, arguments, id="call_0")


MESSAGES = ({"role": "system", "content": "solve"}, {"role": "user", "content": "Compute 2 + 3."})


def test_a_pair_renders_as_prompt_plus_each_action():
    pair = Preference(
        MESSAGES,
        (),
        assistant_message(call("add", a=2, b=3)),
        assistant_message(call("finish", answer="")),
    )
    tokenizer = CharTokenizer(VOCAB)
    example = pair_example(tokenizer, pair)
    assert example is not None
    prompt = tokenizer.apply_chat_template(
        [{"role": m["role"], "content": m["content"]} for m in MESSAGES],
        add_generation_prompt=True,
    )
    assert example.prompt_ids == tokenizer(prompt)["input_ids"]
    decoded = "".join(chr(i - 1) for i in example.chosen_ids)
    assert decoded.startswith('{"name": "add"') and decoded.endswith("\x03")
    chosen, rejected = example.sequences()
    assert sum(chosen[1]) == len(example.chosen_ids)
    assert sum(rejected[1]) == len(example.rejected_ids)
    assert pair_example(tokenizer, pair, max_tokens=len(example.prompt_ids)) is None
    same = Preference(MESSAGES, (), pair.chosen, pair.chosen)
    assert pair_example(tokenizer, same) is None


def test_a_scored_episode_masks_every_action_failed_ones_too():
    bad = call("add", a="x", b=3)
    good = ToolCall("finish", {"answer": "5"}, id="call_1")
    steps = (
        Step(bad, Observation("Error: a must be a number", error="a must be a number")),
        Step(good, Observation("Answer submitted.", done=True)),
    )
    messages = (
        *MESSAGES,
        assistant_message(bad),
        tool_message(bad, "Error: a must be a number"),
        assistant_message(good),
        tool_message(good, "Answer submitted."),
    )
    task = Task("calc-x", "calc", "Compute 2 + 3.", "train")
    episode = Trajectory(task, "base", "1", messages, steps=steps)
    example = scored_example(CharTokenizer(VOCAB), Scored(episode, -0.5))
    assert example is not None and set(example.advantages) == {-0.5}
    masked = "".join(
        chr(i - 1) for i, m in zip(example.input_ids, example.action_mask, strict=True) if m
    )
    assert '"a": "x"' in masked and '"answer": "5"' in masked
    assert len(example.advantages) == len(masked)
    # Per-turn credit: each turn's tokens take their own turn's advantage.
    stepped = scored_example(CharTokenizer(VOCAB), Scored(episode, -0.5, (-1.0, 2.0)))
    assert stepped is not None
    first = len(masked) - masked.index('{"name": "finish"')
    assert stepped.advantages == [-1.0] * (len(masked) - first) + [2.0] * first


def test_token_logps_match_the_full_softmax():
    model = tiny_model()
    ids = [5, 9, 17, 33, 2, 7]
    mask = [0, 0, 1, 1, 0, 1]
    got = token_logps(model, [(ids, mask), (ids[:4], mask[:4])])
    logits = model(torch.tensor([ids])).logits[0]
    full = torch.log_softmax(logits.float(), dim=-1)
    expected = [float(full[t - 1, ids[t]]) for t in range(1, len(ids)) if mask[t]]
    assert [round(float(x), 4) for x in got[0]] == [round(x, 4) for x in expected]
    assert len(got[1]) == 2


def margin(model, example):
    chosen, rejected = example.sequences()
    with torch.no_grad():
        logps = token_logps(model, [chosen, rejected])
    return float(logps[0].sum() - logps[1].sum())


def lora_b_norm(directory):
    from safetensors.torch import load_file

    weights = load_file(str(directory / "adapter_model.safetensors"))
    return sum(float(w.abs().sum()) for name, w in weights.items() if "lora_B" in name)


def test_dpo_raises_the_chosen_action_over_the_rejected_one(tmp_path):
    import peft

    examples = [PairExample([3, 4, 5, 6], [10, 11, 12], [20, 21]), PairExample([7, 8], [30], [40])]
    before = [margin(tiny_model(), e) for e in examples]
    settings = LoraSettings(steps=12, batch_size=2, learning_rate=5e-3, rank=4, beta=0.5)
    losses = train_dpo(tiny_model(), examples, tmp_path / "a", settings)
    assert math.isclose(losses[0], math.log(2), rel_tol=1e-3)  # the reference is the start
    assert losses[-1] < losses[0]
    assert lora_b_norm(tmp_path / "a") > 0
    trained = peft.PeftModel.from_pretrained(tiny_model(), str(tmp_path / "a"))
    after = [margin(trained, e) for e in examples]
    assert all(a > b + 0.1 for a, b in zip(after, before, strict=True))


def test_the_chosen_nll_term_adds_to_the_loss_and_trains_the_chosen_action(tmp_path):
    import peft

    examples = [PairExample([3, 4, 5, 6], [10, 11, 12], [20, 21]), PairExample([7, 8], [30], [40])]

    def chosen_logps(model):
        return [float(token_logps(model, [e.sequences()[0]])[0].sum()) for e in examples]

    before = chosen_logps(tiny_model())
    nlls = [-logp / len(e.chosen_ids) for logp, e in zip(before, examples, strict=True)]
    settings = LoraSettings(
        steps=12, batch_size=2, learning_rate=5e-3, rank=4, beta=0.5, chosen_nll_weight=2.0
    )
    losses = train_dpo(tiny_model(), examples, tmp_path / "rpo", settings)
    # At the start the policy is the reference: log 2 per pair plus its weighted NLL, averaged
    # over the step's two pairs (drawn with replacement).
    starts = [math.log(2) + 2.0 * (a + b) / 2 for a in nlls for b in nlls]
    assert any(math.isclose(losses[0], start, rel_tol=1e-4) for start in starts)
    # With beta 0 the DPO term is a constant log 2: only the NLL term can move the weights.
    flat = replace(settings, beta=0.0)
    train_dpo(tiny_model(), examples, tmp_path / "nll", flat)
    train_dpo(tiny_model(), examples, tmp_path / "none", replace(flat, chosen_nll_weight=0.0))
    assert lora_b_norm(tmp_path / "none") == 0
    assert lora_b_norm(tmp_path / "nll") > 0
    trained = peft.PeftModel.from_pretrained(tiny_model(), str(tmp_path / "nll"))
    assert all(a > b + 0.1 for a, b in zip(chosen_logps(trained), before, strict=True))


def test_anchors_hold_their_actions_only_when_weighted(tmp_path):
    import peft

    pair = PairExample([3, 4, 5, 6], [10, 11, 12], [20, 21])
    anchor = Example([7, 8, 9, 40, 41, 42], [0, 0, 0, 1, 1, 1])

    def anchor_logp(model):
        with torch.no_grad():
            logps = token_logps(model, [(anchor.input_ids, anchor.assistant_masks)])
        return float(logps[0].sum())

    before = anchor_logp(tiny_model())
    settings = LoraSettings(steps=12, batch_size=2, learning_rate=5e-3, rank=4, beta=0.0)
    # With beta 0 the pair's loss is a constant log 2: only the anchor term moves the weights.
    losses = train_dpo(tiny_model(), [pair, anchor], tmp_path / "unweighted", settings)
    assert lora_b_norm(tmp_path / "unweighted") == 0
    assert all(math.isclose(x, math.log(2), rel_tol=1e-4) for x in losses)
    weighted = replace(settings, anchor_weight=3.0)
    losses = train_dpo(tiny_model(), [pair, anchor], tmp_path / "weighted", weighted)
    # Step 0: log 2 for the pairs plus 3 times the anchor's mean token NLL.
    assert math.isclose(losses[0], math.log(2) - 3.0 * before / 3, rel_tol=1e-4)
    trained = peft.PeftModel.from_pretrained(tiny_model(), str(tmp_path / "weighted"))
    assert anchor_logp(trained) > before + 0.1
    # Anchors alone leave nothing for DPO to train: the trainer returns None for them.
    assert DPO.usable([pair, anchor]) and not DPO.usable([anchor])


def test_an_anchor_episode_tokenises_as_sft_trains_it():
    finish = ToolCall("finish", {"answer": "5"}, id="call_1")
    messages = (*MESSAGES, assistant_message(finish), tool_message(finish, "Answer submitted."))
    task = Task("calc-x", "calc", "Compute 2 + 3.", "train")
    steps = (Step(finish, Observation("Answer submitted.", done=True)),)
    episode = Trajectory(task, "base", "1", messages, steps=steps)
    example = pair_or_anchor_example(CharTokenizer(VOCAB), episode)
    assert isinstance(example, Example)
    masked = "".join(
        chr(i - 1) for i, m in zip(example.input_ids, example.assistant_masks, strict=True) if m
    )
    assert '"answer": "5"' in masked and "Compute" not in masked
    pair = Preference(MESSAGES, (), assistant_message(finish), assistant_message(call("add")))
    assert isinstance(pair_or_anchor_example(CharTokenizer(VOCAB), pair), PairExample)


def test_dpo_continues_an_adapter_and_holds_to_it_as_the_reference(tmp_path):
    import peft

    examples = [PairExample([3, 4, 5, 6], [10, 11, 12], [20, 21])]
    settings = LoraSettings(steps=6, batch_size=1, learning_rate=5e-3, rank=4, beta=0.5)
    train_dpo(tiny_model(), examples, tmp_path / "first", settings)
    start = peft.PeftModel.from_pretrained(tiny_model(), str(tmp_path / "first"))
    losses = train_dpo(tiny_model(), examples, tmp_path / "second", settings, tmp_path / "first")
    assert math.isclose(losses[0], math.log(2), rel_tol=1e-3)
    second = peft.PeftModel.from_pretrained(tiny_model(), str(tmp_path / "second"))
    assert margin(second, examples[0]) > margin(start, examples[0])


def test_grpo_makes_good_actions_likelier_and_bad_ones_rarer(tmp_path):
    import peft

    good = ScoredExample([3, 4, 5, 10, 11], [0, 0, 0, 1, 1], 1.0)
    bad = ScoredExample([3, 4, 5, 20, 21], [0, 0, 0, 1, 1], -1.0)

    def logp(model, example):
        with torch.no_grad():
            return float(token_logps(model, [(example.input_ids, example.action_mask)])[0].sum())

    base = tiny_model()
    before = (logp(base, good), logp(base, bad))
    settings = LoraSettings(steps=12, batch_size=2, learning_rate=5e-3, rank=4, beta=0.04)
    losses = train_grpo(tiny_model(), [good, bad], tmp_path / "g", settings)
    assert lora_b_norm(tmp_path / "g") > 0
    assert losses[0] == pytest.approx(-(sum(a for a in [1.0, -1.0]) / 2), abs=1.0)
    trained = peft.PeftModel.from_pretrained(tiny_model(), str(tmp_path / "g"))
    assert logp(trained, good) > before[0] and logp(trained, bad) < before[1]


def test_grpo_clipping_stops_the_push_once_the_ratio_leaves_the_range(tmp_path):
    import peft

    good = ScoredExample([3, 4, 5, 10, 11], [0, 0, 0, 1, 1], 1.0)

    def moved(clip):
        settings = LoraSettings(
            steps=12, batch_size=1, learning_rate=5e-2, rank=4, beta=0.0, clip=clip
        )
        out = tmp_path / f"clip{clip}"
        train_grpo(tiny_model(), [good], out, settings)
        model = peft.PeftModel.from_pretrained(tiny_model(), str(out))
        with torch.no_grad():
            return float(token_logps(model, [(good.input_ids, good.action_mask)])[0].sum())

    assert moved(0.05) < moved(10.0)


def test_dpo_reads_the_reference_with_its_own_bar_before_the_training_bar(tmp_path):
    examples = [
        PairExample([3, 4, 5], [10, 11], [20]),
        PairExample([7, 8], [30], [40]),
        PairExample([6], [12], [13, 14]),
    ]
    settings = LoraSettings(steps=1, batch_size=2, learning_rate=5e-3, rank=4)
    progress = WatchedProgress()
    with progress:
        train_dpo(tiny_model(), examples, tmp_path / "a", settings, progress=progress)
    # Each side (chosen, then rejected) in batches of two: 2 + 1 + 2 + 1 of 6 sequences.
    assert progress.advances == [
        ("reference", 2, 6),
        ("reference", 3, 6),
        ("reference", 5, 6),
        ("reference", 6, 6),
    ]
    reference, training = progress.tasks
    assert reference.finished
    assert training.description.startswith("training (dpo)") and training.completed == 1


def test_grpo_reads_the_reference_with_its_own_bar_before_the_training_bar(tmp_path):
    examples = [ScoredExample([3, 4, 5, 10 + i], [0, 0, 0, 1], 1.0 - i) for i in range(3)]
    settings = LoraSettings(steps=1, batch_size=2, learning_rate=5e-3, rank=4)
    progress = WatchedProgress()
    with progress:
        train_grpo(tiny_model(), examples, tmp_path / "g", settings, progress=progress)
    assert progress.advances == [("reference", 2, 3), ("reference", 3, 3)]
    assert [task.description.split(" (")[0] for task in progress.tasks] == [
        "reference",
        "training",
    ]
