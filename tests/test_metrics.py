import pytest

from ratchet.envs.calc import env
from ratchet.metrics import bootstrap_ci, pass_at_k, pass_hat_k, summarize
from ratchet.tool import ToolCall
from ratchet.trajectory import play


def test_pass_at_k_estimators():
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert pass_hat_k(3, 3, 3) == 1.0


def test_bootstrap_ci_brackets_the_mean():
    low, high = bootstrap_ci([0.0, 1.0] * 20)
    assert low < 0.5 < high
    assert bootstrap_ci([1.0] * 5) == (1.0, 1.0)


def test_summarize_groups_samples_by_task_and_difficulty():
    tasks = env.tasks("test", 4)
    trajectories = []
    for task in tasks:
        good = play(env, task, env.oracle(task))
        bad = play(env, task, [ToolCall("finish", {"answer": "nope"})])
        pair = [good, bad] if task.difficulty % 2 else [good, good]
        trajectories += pair
    metrics = summarize(trajectories, k=2)
    assert metrics.n == 4
    assert metrics.pass_at_1 == pytest.approx((0.5 + 1 + 0.5 + 1) / 4)
    assert metrics.pass_at_k == 1.0
    assert metrics.pass_hat_k == pytest.approx(0.5)
    assert metrics.by_difficulty[2].pass_at_1 == 1.0
    assert metrics.by_difficulty[1].pass_hat_k == 0.0
    assert set(metrics.to_dict()) >= {"pass@1", "pass@k", "pass^k", "ci95", "by_difficulty"}


def test_empty_input_gives_zeros():
    assert summarize([], k=1).n == 0
