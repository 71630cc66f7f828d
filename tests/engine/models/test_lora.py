import io

import pytest
from rich.console import Console
from rich.progress import Progress

from ratchet.engine.models.base import LoraSettings
from ratchet.engine.models.lora import optimise

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def quiet_progress():
    return Progress(console=Console(file=io.StringIO()), disable=True)


def three_part_loss(weight, progress, seen):
    def loss(step):
        for _ in range(3):
            # What the bar says while a step is under way, as a watcher would read it.
            if progress is not None:
                seen.append((progress.tasks[0].description, progress.tasks[0].completed))
            yield (weight**2).sum() / 3

    return loss


def test_each_micro_batch_of_a_step_is_reported_as_it_is_backpropagated():
    weight = torch.nn.Parameter(torch.ones(2))
    calls = []
    settings = LoraSettings(steps=2, learning_rate=0.01)
    loss = three_part_loss(weight, None, [])
    losses = optimise(
        torch.nn.ParameterList([weight]), loss, settings, on_micro_batch=lambda *a: calls.append(a)
    )
    assert calls == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]
    assert losses[0] == pytest.approx(2.0)


def test_the_training_bar_shows_the_micro_batch_within_a_step_and_the_last_loss():
    weight = torch.nn.Parameter(torch.ones(2))
    seen = []
    with quiet_progress() as progress:
        loss = three_part_loss(weight, progress, seen)
        settings = LoraSettings(steps=2, learning_rate=0.01)
        optimise(torch.nn.ParameterList([weight]), loss, settings, progress, "training", 3)
        final = progress.tasks[0]
    assert seen[:4] == [
        ("training", 0),
        ("training (batch 1/3)", 0),
        ("training (batch 2/3)", 0),
        ("training (loss 2.000)", 1),
    ]
    assert seen[4:] == [
        ("training (batch 1/3, loss 2.000)", 1),
        ("training (batch 2/3, loss 2.000)", 1),
    ]
    assert final.completed == 2 and final.total == 2
    assert final.description.startswith("training (loss ")


def test_a_step_of_unknown_size_counts_its_micro_batches_without_a_total():
    weight = torch.nn.Parameter(torch.ones(2))
    seen = []
    with quiet_progress() as progress:
        loss = three_part_loss(weight, progress, seen)
        optimise(torch.nn.ParameterList([weight]), loss, LoraSettings(steps=1), progress)
    assert [description for description, _ in seen] == [
        "training",
        "training (batch 1)",
        "training (batch 2)",
    ]
