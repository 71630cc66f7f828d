"""A Harbor task's problem is its instruction and solution, not its directory's name.

Nothing here runs an episode, so none of it needs the sandbox.
"""

import warnings
from pathlib import Path

import pytest

from ratchet.core.task import SPLITS
from ratchet.envs.check import check_splits
from ratchet.envs.registry import load_env_reference
from ratchet.integrations.harbor import RepeatedTasks, harbor_env, problem_of, read_task

EXAMPLE = Path(__file__).parents[2] / "examples" / "harbor_env.py"
SUM = "The file /app/numbers.txt lists whole numbers. Write their sum to /app/answer.txt."
SOLVE = "awk '{ s += $1 } END { print s }' /app/numbers.txt > /app/answer.txt\n"


def _task(root: Path, name: str, numbers: list[int], instruction: str = SUM, solve: str = SOLVE):
    task = root / name
    for folder in ("environment", "tests", "solution"):
        (task / folder).mkdir(parents=True)
    (task / "instruction.md").write_text(instruction)
    (task / "environment" / "numbers.txt").write_text("".join(f"{n}\n" for n in numbers))
    (task / "tests" / "test.sh").write_text(f"test $(cat /app/answer.txt) = {sum(numbers)}\n")
    if solve:
        (task / "solution" / "solve.sh").write_text(solve)
    return task


def test_the_same_words_and_solution_over_other_files_are_one_problem(tmp_path):
    first, second = _task(tmp_path, "a", [1, 2]), _task(tmp_path, "b", [30, 40])
    respaced = _task(tmp_path, "c", [5], instruction=SUM.upper().replace(" ", "  "))
    assert problem_of(read_task(first)) == problem_of(read_task(second))
    assert problem_of(read_task(respaced)) == problem_of(read_task(first))


def test_other_words_another_solution_or_no_solution_make_another_problem(tmp_path):
    base = problem_of(read_task(_task(tmp_path, "a", [1, 2])))
    worded = _task(tmp_path, "b", [1, 2], instruction=SUM.replace("sum", "largest"))
    solved = _task(tmp_path, "c", [1, 2], solve=SOLVE.replace("s += $1", "s += 2 * $1"))
    unsolved = [_task(tmp_path, name, [1, 2], solve="") for name in ("d", "e")]
    keys = [problem_of(read_task(task)) for task in (worded, solved, *unsolved)]
    assert len({base, *keys}) == 5


def test_copies_listed_in_two_splits_stay_in_the_more_held_out_one_with_a_warning(tmp_path):
    for index in range(4):
        _task(tmp_path, f"copy-{index}", [index, 10 * index])
    _task(tmp_path, "other", [3], instruction=SUM.replace("sum", "largest"))
    splits = {"train": ["copy-0", "copy-1", "other"], "probe": ["copy-2"], "test": ["copy-3"]}
    with pytest.warns(RepeatedTasks, match=r"3 tasks .*: 2 from train, 1 from probe"):
        env = harbor_env(tmp_path, name="copies", splits=splits)
    assert [task.params["task"] for task in env.tasks("train", 1)] == ["other"]
    assert [task.params["task"] for task in env.tasks("test", 1)] == ["copy-3"]
    with pytest.raises(ValueError, match="probe split holds 0 problems"):
        env.tasks("probe", 1)


def test_without_splits_copies_fall_in_one_split_as_one_problem(tmp_path):
    for index in range(6):
        _task(tmp_path, f"copy-{index}", [index, 7])
    env = harbor_env(tmp_path, name="hashed")
    held = [env.sample.size(env.name, split, env.problem_key) for split in SPLITS]
    assert sorted(held) == [0, 0, 1]


def test_distinct_tasks_are_kept_where_they_are_listed_without_a_warning(tmp_path):
    for index in range(3):
        _task(tmp_path, f"t{index}", [index], instruction=SUM.replace("sum", f"sum plus {index}"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = harbor_env(tmp_path, name="distinct", splits={"train": ["t0", "t1"], "test": ["t2"]})
    assert len(env.tasks("train", 2)) == 2


def test_the_example_s_tasks_are_distinct_problems_and_its_splits_pass_the_check():
    env = load_env_reference(f"{EXAMPLE}:env")
    listed = [spec for split in SPLITS for spec in getattr(env.sample, split)]
    assert len({env.problem_key(spec.params) for spec in listed}) == len(listed) == 42
    assert "none in two splits" in check_splits(env, draws=20)
