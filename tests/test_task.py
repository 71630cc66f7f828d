import pytest

from ratchet.task import SPLITS, Task, TaskSpec, content_key, generate_tasks, split_of


def sample(rng, difficulty):
    a, b = rng.randint(0, 999), rng.randint(0, 999)
    return TaskSpec(f"{a} + {b} at level {difficulty}", {"a": a, "b": b}, family="sum")


def test_generate_is_deterministic_and_distinct():
    first = generate_tasks("toy", sample, split="train", n=50, seed=3)
    assert first == generate_tasks("toy", sample, split="train", n=50, seed=3)
    assert len({t.id for t in first}) == 50
    assert first != generate_tasks("toy", sample, split="train", n=50, seed=4)


def test_every_task_lands_in_its_own_split():
    for split in SPLITS:
        for task in generate_tasks("toy", sample, split=split, n=30):
            assert task.split == split
            assert split_of(content_key(task.instruction, task.params)) == split


def test_difficulty_cycles_or_is_fixed():
    mixed = generate_tasks("toy", sample, split="test", n=10, max_difficulty=5)
    assert [t.difficulty for t in mixed] == [1, 2, 3, 4, 5] * 2
    fixed = generate_tasks("toy", sample, split="test", n=4, difficulty=2)
    assert {t.difficulty for t in fixed} == {2}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "dev", "n": 1}, "split must be one of"),
        ({"split": "test", "n": -1}, "n must be >= 0"),
        ({"split": "test", "n": 1, "difficulty": 6}, "difficulty for toy must be in 1..5"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_tasks("toy", sample, **kwargs)


def test_a_small_space_is_reported_not_looped_forever():
    def tiny(rng, difficulty):
        return TaskSpec("always the same", {})

    with pytest.raises(ValueError, match="could not draw 2 distinct"):
        generate_tasks("toy", tiny, split="train", n=2)


def test_json_round_trip_and_version_check():
    task = generate_tasks("toy", sample, split="probe", n=1)[0]
    assert Task.from_json(task.to_json()) == task
    data = task.to_dict() | {"version": 99}
    with pytest.raises(ValueError, match="schema version 99"):
        Task.from_dict(data)
