import random

import pytest

from ratchet.core.stats import (
    holm,
    paired_differences,
    pass_rate_interval,
    permutation_p_value,
    smallest_p_value,
    wilson,
)


def test_wilson_is_honest_at_the_edges():
    none = wilson(0, 36)
    assert none.low == 0.0 and none.high == pytest.approx(0.0964, abs=1e-3)
    every = wilson(36, 36)
    assert every.high == 1.0 and every.low == pytest.approx(0.9036, abs=1e-3)
    middle = wilson(18, 36)
    assert middle.low < 0.5 < middle.high
    assert wilson(0, 0).low == 0.0 and wilson(0, 0).high == 1.0


def test_wilson_covers_the_true_rate_about_95_percent_of_the_time():
    rng = random.Random(0)
    hits = 0
    for _ in range(2000):
        passes = sum(rng.random() < 0.1 for _ in range(36))
        interval = wilson(passes, 36)
        hits += interval.low <= 0.1 <= interval.high
    assert 0.92 <= hits / 2000 <= 0.99


def test_several_samples_per_task_use_a_task_clustered_bootstrap():
    mixed = pass_rate_interval([[True, False, True], [False, False, False], [True] * 3] * 10)
    assert mixed.method == "cluster-bootstrap" and mixed.low < 0.55 < mixed.high
    one_each = pass_rate_interval([[True], [False]] * 10)
    assert one_each.method == "wilson"
    all_failed = pass_rate_interval([[False] * 3] * 36)
    assert all_failed.method == "wilson-over-tasks"
    assert all_failed.high == pytest.approx(0.0964, abs=1e-3)


def test_paired_differences_average_samples_per_task():
    before = {("a", 0): False, ("a", 1): True, ("b", 0): True, ("b", 1): True}
    after = {("a", 0): True, ("a", 1): True, ("b", 0): False, ("b", 1): True}
    assert paired_differences(before, after) == {"a": 0.5, "b": -0.5}
    with pytest.raises(ValueError, match="same, non-empty pairs"):
        paired_differences(before, {("a", 0): True})


def test_permutation_p_value_is_exact_for_few_tasks():
    assert permutation_p_value([1.0] * 5, resamples=100) == pytest.approx(1 / 32)
    assert permutation_p_value([0.0] * 5, resamples=100) == 1.0
    assert permutation_p_value([1.0, -1.0], resamples=100) == pytest.approx(0.75)
    assert smallest_p_value(5) == pytest.approx(1 / 32)


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis():
    assert holm([0.01, 0.04, 0.03], alpha=0.05) == [
        (True, pytest.approx(0.05 / 3)),
        (False, 0.05),
        (False, 0.025),
    ]
    assert [rejected for rejected, _ in holm([0.01, 0.04, 0.02], alpha=0.05)] == [True] * 3
    assert [rejected for rejected, _ in holm([0.02, 0.04, 0.03], alpha=0.05)] == [False] * 3
