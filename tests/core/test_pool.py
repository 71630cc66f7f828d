import pytest

from ratchet.core.env import SimpleEnv
from ratchet.core.pool import TaskPool
from ratchet.core.task import TaskSpec
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict


def specs(names, difficulty=None):
    return [TaskSpec(f"Say {n}.", {"n": n}, difficulty=difficulty) for n in names]


POOL = TaskPool(train=specs("abcdef"), probe=specs("gh"), test=specs("ijk"))


def test_tasks_keep_their_given_split_and_are_deterministic():
    for split, size in (("train", 6), ("probe", 2), ("test", 3)):
        tasks = POOL.tasks("toy", split, size)
        assert {t.split for t in tasks} == {split}
        assert len({t.problem for t in tasks}) == size
        assert POOL.tasks("toy", split, size, seed=5) == POOL.tasks("toy", split, size, seed=5)
    assert POOL.tasks("toy", "train", 6, seed=1) != POOL.tasks("toy", "train", 6, seed=2)


def test_asking_for_more_than_a_split_holds_is_a_clear_error():
    with pytest.raises(ValueError, match="probe split holds 2 problems, fewer than the 3 asked"):
        POOL.tasks("toy", "probe", 3)


def test_a_problem_in_two_splits_stays_only_in_the_more_held_out_one():
    pool = TaskPool(train=specs("abc"), probe=specs("cd"), test=specs("dd"))
    assert pool.size("toy", "test") == 1  # listed twice, one problem
    assert pool.size("toy", "probe") == 1  # d went to test
    assert pool.size("toy", "train") == 2  # c went to probe
    owners = {t.problem: s for s in ("train", "probe", "test") for t in
              pool.tasks("toy", s, pool.size("toy", s))}  # fmt: skip
    assert len(owners) == 4


def test_from_splits_refuses_unknown_split_names():
    with pytest.raises(ValueError, match="got validation"):
        TaskPool.from_splits({"train": [], "validation": []})


def test_difficulty_filters_and_sets_max_difficulty():
    pool = TaskPool(train=[*specs("ab", 1), *specs("cde", 2)], probe=specs("f", 2), test=specs("g"))
    assert pool.max_difficulty == 2
    assert {t.difficulty for t in pool.tasks("toy", "train", 3, difficulty=2)} == {2}


def verify(task, world, answer):
    return Verdict.of(answer == task.params["n"])


def test_simple_env_draws_from_a_pool_and_takes_its_difficulty_range():
    env = SimpleEnv(
        name="pooled",
        description="a pool",
        sample=POOL,
        build=lambda task: None,
        tools=lambda world: [],
        verify=verify,
        oracle=lambda task: [ToolCall("finish", {"answer": task.params["n"]})],
    )
    assert env.max_difficulty == 1
    assert sorted(t.params["n"] for t in env.tasks("test", 3)) == ["i", "j", "k"]
    with pytest.raises(ValueError, match=r"difficulty for pooled must be in 1\.\.1"):
        env.tasks("test", 1, difficulty=2)
