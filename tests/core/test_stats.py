import random

import pytest

from ratchet.core.stats import (
    between_runs,
    holm,
    paired_differences,
    pass_rate_interval,
    permutation_p_value,
    smallest_p_value,
    t_quantile,
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


def test_weighted_holm_gives_the_heavier_hypothesis_more_alpha_and_equal_weights_change_nothing():
    assert holm([0.01, 0.04, 0.03], 0.05, [2.0, 2.0, 2.0]) == holm([0.01, 0.04, 0.03], 0.05)
    # As a round whose rft lever has one acceptance in one candidate and exemplars none.
    (kept, plain), _ = holm([0.0107, 0.9], 0.0167)
    (favoured, weighted), (_, rest) = holm([0.0107, 0.9], 0.0167, [2 / 3, 1 / 3])
    assert not kept and plain == pytest.approx(0.0167 / 2)
    assert favoured and weighted == pytest.approx(0.0167 * 2 / 3)
    assert rest == pytest.approx(0.0167)  # the last one tested gets what is left: all of it
    # Taken by p / w: a light hypothesis with the smaller p-value comes second.
    assert holm([0.02, 0.03], 0.05, [0.1, 0.9]) == [
        (True, pytest.approx(0.05)),
        (True, pytest.approx(0.045)),
    ]
    assert holm([0.06, 0.03], 0.05, [0.1, 0.9])[0] == (False, pytest.approx(0.05))
    with pytest.raises(ValueError, match="positive weight"):
        holm([0.01, 0.02], 0.05, [1.0, 0.0])


@pytest.mark.parametrize(
    ("level", "df", "table"),
    [(0.95, 1, 12.706), (0.95, 2, 4.303), (0.95, 3, 3.182), (0.95, 10, 2.228),
     (0.99, 4, 4.604), (0.90, 30, 1.697)],
)  # fmt: skip
def test_t_quantiles_match_the_tables(level, df, table):
    assert t_quantile(level, df) == pytest.approx(table, abs=1e-3)


def test_the_between_run_interval_is_a_t_interval_over_the_per_seed_gains():
    interval = between_runs([0.33, 0.42, 0.56])
    assert interval.method == "t-between-runs"
    # mean 0.4367, sd 0.1159, t(2) 4.303: half-width 0.288
    assert interval.low == pytest.approx(0.1487, abs=1e-3)
    assert interval.high == pytest.approx(0.7246, abs=1e-3)
    agreeing = between_runs([0.4, 0.4, 0.4])
    assert agreeing.low == pytest.approx(0.4) and agreeing.high == pytest.approx(0.4)
    with pytest.raises(ValueError, match="two or more finite gains"):
        between_runs([0.4])
    with pytest.raises(ValueError, match="two or more finite gains"):
        between_runs([0.4, float("nan")])


def test_the_between_run_interval_covers_the_true_mean_gain_about_95_percent_of_the_time():
    # Each run's gain varies around the true gain by more than its tasks alone would say.
    rng = random.Random(1)
    hits = 0
    for _ in range(2000):
        interval = between_runs([rng.gauss(0.3, 0.1) for _ in range(3)])
        hits += interval.low <= 0.3 <= interval.high
    assert 0.93 <= hits / 2000 <= 0.97
