from collections import Counter
from typing import Any

from fakes import CharTokenizer, WatchedProgress
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation, Step, Trajectory, assistant_message
from ratchet.engine.models.base import LoraSettings
from ratchet.engine.models.lora import lora_model
from ratchet.engine.models.training import (
    SHARED_MIN,
    LocalTrainer,
    balanced_weights,
    shared_prefix,
    summed_logp_parts,
)


def _share(patterns: list[str], weights: list[float], chosen: str) -> float:
    return sum(w for p, w in zip(patterns, weights, strict=True) if p == chosen) / sum(weights)


def test_patterns_of_one_length_are_drawn_equally_often() -> None:
    patterns = ["add,finish"] * 9 + ["multiply,finish"] * 3
    weights = balanced_weights(patterns)
    assert _share(patterns, weights, "add,finish") == 0.5
    assert _share(patterns, weights, "multiply,finish") == 0.5


def test_each_length_keeps_its_share_of_the_successes() -> None:
    # Ten one-operation successes and one two-operation success: the rare long pattern must
    # not be drawn as often as a whole length of common short ones.
    patterns = ["add,finish"] * 8 + ["multiply,finish"] * 2 + ["add,subtract,finish"]
    weights = balanced_weights(patterns)
    assert abs(_share(patterns, weights, "add,subtract,finish") - 1 / 11) < 1e-12
    assert abs(sum(weights) - len(patterns)) < 1e-9


def test_a_length_exponent_below_one_draws_a_rare_length_more_often() -> None:
    patterns = ["add,finish"] * 8 + ["multiply,finish"] * 8 + ["add,subtract,finish"] * 4
    rare = "add,subtract,finish"
    assert abs(_share(patterns, balanced_weights(patterns, 1.0), rare) - 4 / 20) < 1e-12
    # Square roots of the lengths' counts: 4 against 2.
    square_root = balanced_weights(patterns, 0.5)
    assert abs(_share(patterns, square_root, rare) - 2 / 6) < 1e-12
    assert abs(_share(patterns, square_root, "add,finish") - 2 / 6) < 1e-12
    assert abs(_share(patterns, balanced_weights(patterns, 0.0), rare) - 1 / 2) < 1e-12
    assert abs(sum(square_root) - len(patterns)) < 1e-9


def test_examples_of_one_pattern_weigh_the_same() -> None:
    patterns = ["a,finish", "b,finish", "a,finish", "a,b,finish", "a,c,finish", "a,c,finish"]
    weights = balanced_weights(patterns)
    by_pattern: dict[str, set[float]] = {}
    for pattern, weight in zip(patterns, weights, strict=True):
        by_pattern.setdefault(pattern, set()).add(weight)
    assert all(len(values) == 1 for values in by_pattern.values())
    assert Counter(patterns)["a,c,finish"] * by_pattern["a,c,finish"].pop() == 1.5


def test_the_shared_prefix_stops_before_the_first_masked_token() -> None:
    batch = [([1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 1, 1]), ([1, 2, 3, 4, 9], [0, 0, 0, 1, 1])]
    assert shared_prefix(batch) == 2  # token 3 of the second sequence is predicted from 2
    assert shared_prefix([([1, 2, 3], [0, 1, 1]), ([7, 2, 3], [0, 1, 1])]) == 0


def _tiny_model(layers: int = 2) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(config).float()


def _gradients(model: Any, parts: Any) -> tuple[float, Any]:
    import torch

    model.zero_grad()
    total = 0.0
    for part in parts:
        part.backward()
        total += float(part.detach())
    return total, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_reading_the_shared_prefix_once_gives_the_same_loss_and_gradient() -> None:
    import torch

    model = _tiny_model()
    prefix = [3, 14, 15, 9, 26, 5] * 12  # 72 tokens, above SHARED_MIN
    batch = [
        ([*prefix, 35, 8, 9, 7, 9], [0] * 72 + [0, 1, 1, 1, 1]),
        ([*prefix, 32, 38, 4, 6], [0] * 72 + [0, 0, 1, 1]),
        ([*prefix, 2, 6, 43], [0] * 72 + [0, 1, 1]),
    ]
    assert shared_prefix(batch) >= SHARED_MIN
    shared = _gradients(model, summed_logp_parts(model, batch, -0.5))
    apart = _gradients(model, (p for seq in batch for p in summed_logp_parts(model, [seq], -0.5)))
    assert abs(shared[0] - apart[0]) < 1e-5
    assert torch.allclose(shared[1], apart[1], atol=1e-6)


def test_an_adapter_on_the_top_layers_backpropagates_through_those_layers_only() -> None:
    import torch

    model = lora_model(_tiny_model(layers=4), LoraSettings(rank=4, depth=0.5))
    trained = {name.split(".layers.")[1].split(".")[0] for name, p in model.named_parameters()
               if p.requires_grad}  # fmt: skip
    assert trained == {"2", "3"}
    whole = lora_model(_tiny_model(layers=4), LoraSettings(rank=4))
    assert whole.peft_config["default"].layers_to_transform is None  # loads in any engine
    with torch.no_grad():  # a fresh adapter is the identity: give it weights to differentiate
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    decoder_layers = model.get_base_model().get_decoder().layers
    reached: list[int] = []
    for index, layer in enumerate(decoder_layers):
        layer.register_full_backward_hook(lambda *_, i=index: reached.append(i))
    prefix = [3, 14, 15, 9, 26, 5] * 12
    batch = [
        ([*prefix, 35, 8, 9, 7, 9], [0] * 72 + [0, 1, 1, 1, 1]),
        ([*prefix, 32, 38, 4, 6], [0] * 72 + [0, 0, 1, 1]),
    ]
    shared = _gradients(model, summed_logp_parts(model, batch, -0.5))
    assert reached and min(reached) == 2
    apart = _gradients(model, (p for seq in batch for p in summed_logp_parts(model, [seq], -0.5)))
    assert abs(shared[0] - apart[0]) < 1e-5
    assert torch.allclose(shared[1], apart[1], atol=1e-6)


def test_loading_and_tokenising_have_their_own_bar_before_the_training_bar(
    monkeypatch, tmp_path
) -> None:
    import ratchet.engine.models.checkpoints as checkpoints

    progress = WatchedProgress()
    shown_while_loading: list[str] = []

    def load(path: str | None) -> tuple[Any, CharTokenizer]:
        shown_while_loading.extend(task.description for task in progress.tasks)
        return _tiny_model(), CharTokenizer(50)

    monkeypatch.setattr(checkpoints, "load", load)
    call = ToolCall("add", {"a": 1, "b": 2})
    task = Task(id="t", env="calc", instruction="Compute 1 + 2.", split="train")
    messages = ({"role": "user", "content": task.instruction}, assistant_message(call))
    episode = Trajectory(task, "v1", "calc", messages, steps=(Step(call, Observation("3")),))
    settings = LoraSettings(steps=1, batch_size=2, rank=4)
    with progress:
        result = LocalTrainer().sft([episode] * 3, tmp_path / "adapter", settings, progress)
    assert shown_while_loading == ["preparing (loading the model)"]
    assert progress.advances == [("preparing (tokenising)", n, 3) for n in (1, 2, 3)]
    preparing, training = progress.tasks
    assert preparing.finished and training.description.startswith("training")
    assert result is not None and result.examples == 3
