from dataclasses import replace

import pytest

from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.engine.metrics import pass_at_k, pass_hat_k, summarize
from ratchet.envs.calc import env


def test_pass_at_k_estimators():
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert pass_hat_k(3, 3, 3) == 1.0


def test_all_failures_still_get_an_honest_interval():
    tasks = env.tasks("test", 36, difficulty=1)
    failures = [replay(env, t, [ToolCall("finish", {"answer": "nope"})]) for t in tasks]
    metrics = summarize(failures, k=1)
    assert metrics.pass_at_1 == 0.0
    assert metrics.ci95[0] == 0.0 and metrics.ci95[1] == pytest.approx(0.0964, abs=1e-3)
    assert metrics.to_dict()["ci_method"] == "wilson"


def test_seconds_per_task_is_wall_time_over_tasks():
    tasks = env.tasks("test", 4)
    played = [replay(env, t, env.oracle(t)) for t in tasks for _ in range(2)]
    assert summarize(played, k=2, wall_s=8.0).seconds_per_task == pytest.approx(2.0)


def test_summarize_groups_samples_by_task_and_difficulty():
    tasks = env.tasks("test", 4)
    trajectories = []
    for task in tasks:
        good = replay(env, task, env.oracle(task))
        bad = replay(env, task, [ToolCall("finish", {"answer": "nope"})])
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


def test_episodes_lost_to_infrastructure_are_left_out_and_counted_apart():
    tasks = env.tasks("test", 4)
    played = [replay(env, t, env.oracle(t)) for t in tasks for _ in range(2)]
    lost = replace(played[1], verdict=None, steps=(), error="infrastructure error: server full")
    whole = [played[0], lost, *played[2:]]  # task 0 keeps one sample; every other task two
    metrics = summarize(whole, k=2)
    assert metrics.pass_at_1 == 1.0 and metrics.n == 4 and metrics.infrastructure_errors == 1
    level = tasks[0].difficulty
    assert metrics.by_difficulty[level].infrastructure_errors == 1
    assert metrics.to_dict()["infrastructure_errors"] == 1
    failed = replace(lost, error="episode failed: RuntimeError: boom")
    assert summarize([played[0], failed, *played[2:]], k=2).pass_at_1 < 1.0  # other crashes fail
    nothing = summarize([lost], k=1)
    assert (nothing.n, nothing.infrastructure_errors) == (0, 1)
