"""The built-in envs' security battery: each hole found by red-teaming them, as a regression.

The generic red-team rows every env gets are tested in ``test_redteam.py``; these are the
holes of particular envs, with the attack played for real where that is cheap.
"""

import json
import random
from dataclasses import replace

import pytest

from ratchet.core.env import attacks_of
from ratchet.envs.calc import env as calc
from ratchet.envs.code import env as code
from ratchet.envs.code import expected, hidden_cases
from ratchet.envs.code import families as code_families
from ratchet.envs.code.families import BY_NAME
from ratchet.envs.redteam import red_team_checks
from ratchet.sandbox import landlock_abi

needs_sandbox = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")
TOP_K = BY_NAME["top_k"]


@pytest.mark.parametrize("params", TOP_K.grid, ids=lambda p: f"k{p['k']}-{p['small']}")
def test_every_top_k_task_has_a_hidden_case_longer_than_k(params):
    for seed in range(20):
        cases = hidden_cases(TOP_K, params, seed)
        assert any(len(items) > params["k"] for (items,) in cases), (params, seed)


def test_sort_and_return_fails_every_top_k_setting():
    for seed, params in enumerate(TOP_K.grid):
        cases = hidden_cases(TOP_K, params, seed)
        want = expected(TOP_K, params, cases)
        for reverse in (False, True):
            got = [json.loads(json.dumps(["list", [["int", v] for v in sorted(items,
                   reverse=reverse)]])) for (items,) in cases]  # fmt: skip
            assert got != want, (params, seed, reverse)


def _row(env, name):
    rows = dict(red_team_checks(env, env.tasks("test", 4)))
    return rows[f"red-team: {name}"]


@needs_sandbox
def test_check_plays_sort_and_return_on_top_k_tasks_and_it_scores_0():
    sort = next(attack for attack in attacks_of(code) if attack.name == "sort and return")
    aimed = [task for task in code.tasks("test", 200) if sort.plans(task)]
    assert aimed and {task.params["family"] for task in aimed} == {"top_k"}
    assert any(task.params["params"]["k"] >= 9 for task in aimed[:4])  # where the hole was
    detail = _row(code, "sort and return")()
    assert detail == "8 attempts on 4 test tasks (list): none passed", detail


@needs_sandbox
def test_the_sort_and_return_row_catches_top_k_without_long_hidden_cases(monkeypatch):
    # The hole as it was: hidden lists of at most 9 items, so for k >= 9 sorting is the answer.
    monkeypatch.setitem(code_families.BY_NAME, "top_k", replace(TOP_K, edge_inputs=None))
    with pytest.raises(AssertionError, match=r"sort and return: task code-\w+ passed"):
        _row(code, "sort and return")()


def test_an_identity_step_does_not_make_a_test_problem_a_training_problem():
    rng = random.Random(0)
    tasks = calc.tasks("test", 60, seed=3)
    for task in tasks:
        steps = [list(step) for step in task.params["steps"]]
        where = rng.randrange(len(steps) + 1)
        steps.insert(where, rng.choice([["multiply", 1], ["add", 0], ["divide", 1],
                                        ["subtract", 0]]))  # fmt: skip
        disguised = {**task.params, "steps": steps}
        assert calc.problem_key(disguised) == task.problem, (task.params, disguised)


def _ported(copies: int):
    """A dataset port that put ``copies`` of its test questions into training under other params
    (a source tag): the problem keys differ, the agent sees the same question and answer."""
    from ratchet.core.env import SimpleEnv
    from ratchet.core.pool import TaskPool
    from ratchet.core.task import TaskSpec
    from ratchet.core.tool import ToolCall
    from ratchet.core.verdict import Verdict

    def question(n: int, where: str) -> TaskSpec:
        params = {"question": f"What is {n} squared?", "answer": str(n * n), "source": where}
        return TaskSpec(f"What is {n} squared?", params)

    test = [question(n, "test") for n in range(36)]
    train = [question(n, "copied") for n in range(copies)]
    train += [question(n, "train") for n in range(100, 140)]
    probe = [question(n, "probe") for n in range(200, 210)]
    return SimpleEnv(
        name="ported",
        description="a dataset port",
        sample=TaskPool(train=train, probe=probe, test=test),
        build=lambda task: None,
        tools=lambda world: [],
        verify=lambda task, world, answer: Verdict.of(answer == task.params["answer"]),
        oracle=lambda task: [ToolCall("finish", {"answer": task.params["answer"]})],
    )


def test_check_fails_test_questions_copied_into_training_under_other_params():
    from ratchet.envs.check import check_splits

    with pytest.raises(AssertionError, match=r"read the same .* and have the same solution"):
        check_splits(_ported(10), draws=40)
    assert "none in two splits" in check_splits(_ported(0), draws=40)
