import pytest

from ratchet.core.serialise import RecordError, from_dict, from_json, to_dict, to_json
from ratchet.core.task import (
    SPLITS,
    Task,
    TaskSpec,
    canonical_key,
    generate_tasks,
    make_task,
    split_of,
)


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
            assert task.problem == canonical_key(task.params)
            assert split_of(task.problem) == split


def worded(rng, difficulty):
    """One problem (a, b) worded three ways: the wording must not decide the split."""
    a, b = rng.randint(0, 30), rng.randint(0, 30)
    template = rng.choice(["{a} + {b}", "Add {a} and {b}.", "What is {a} plus {b}?"])
    return TaskSpec(template.format(a=a, b=b), {"a": a, "b": b})


def test_splits_follow_the_problem_not_the_wording():
    seen: dict[str, str] = {}
    for split in SPLITS:
        for seed in range(5):
            for task in generate_tasks("toy", worded, split=split, n=40, seed=seed):
                assert seen.setdefault(task.problem, split) == split


def test_one_draw_holds_each_problem_once():
    tasks = generate_tasks("toy", worded, split="train", n=200, seed=1)
    assert len({t.problem for t in tasks}) == 200


def test_an_env_may_declare_its_own_problem_key():
    spec = TaskSpec("Add 1 and 2.", {"a": 1, "b": 2, "style": "formal"})
    plain = make_task("toy", spec, difficulty=1)
    keyed = make_task("toy", spec, difficulty=1, problem_key=lambda p: f"{p['a']}+{p['b']}")
    assert plain.problem == canonical_key(spec.params)
    assert keyed.problem == "1+2"


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

    with pytest.raises(ValueError, match="found only 0 distinct train problems at difficulty 2"):
        generate_tasks("toy", tiny, split="train", n=2)


def test_json_round_trip_and_schema_check():
    task = generate_tasks("toy", sample, split="probe", n=1)[0]
    assert from_json(Task, to_json(task)) == task
    with pytest.raises(RecordError, match="schema 99"):
        from_dict(Task, to_dict(task) | {"schema": 99})
    with pytest.raises(RecordError, match="split: Input should be 'train', 'probe' or 'test'"):
        from_dict(Task, to_dict(task) | {"split": "dev"})


def test_reused_candidates_give_the_same_tasks_as_fresh_draws():
    from ratchet.core import task as task_module
    from ratchet.envs.grid import env as grid

    calls = []

    def counted(rng, difficulty):
        calls.append(difficulty)
        return sample(rng, difficulty)

    first = {s: generate_tasks("toy", counted, split=s, n=20, seed=5) for s in SPLITS}
    sampled = len(calls)
    again = {s: generate_tasks("toy", counted, split=s, n=20, seed=5) for s in SPLITS}
    assert again == first
    assert len(calls) == sampled  # the second draw sampled nothing anew
    task_module._cached_candidate.cache_clear()
    assert {s: generate_tasks("toy", counted, split=s, n=20, seed=5) for s in SPLITS} == first
    drawn = {s: grid.tasks(s, 6, seed=2, difficulty=3) for s in SPLITS}
    task_module._cached_candidate.cache_clear()
    assert {s: grid.tasks(s, 6, seed=2, difficulty=3) for s in SPLITS} == drawn


def test_an_unhashable_sampler_draws_without_the_cache():
    class Sampler:
        __hash__ = None

        def __call__(self, rng, difficulty):
            return sample(rng, difficulty)

    tasks = generate_tasks("toy", Sampler(), split="test", n=5, seed=1)
    assert tasks == generate_tasks("toy", sample, split="test", n=5, seed=1)
