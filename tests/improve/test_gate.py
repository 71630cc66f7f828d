import json
import random
from dataclasses import replace

import pytest

from ratchet.core.agent import Agent
from ratchet.core.stats import permutation_p_value
from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import rollout
from ratchet.envs.calc import env
from ratchet.envs.grid import env as grid
from ratchet.envs.suite import Suite
from ratchet.improve.gate import (
    RETEST_FIRST_SAMPLE,
    GateConfig,
    decide_round,
    probe_size,
    retests,
    round_alpha,
    round_spent,
    spent_alpha,
    unreachable,
    winner,
)
from ratchet.improve.gate_simulation import simulate, simulate_rounds

TASKS = env.tasks("probe", 30)
TEMPLATE = replay(env, TASKS[0], [])


def decide(before, after, config, alpha=0.05):
    """The gate's decision on one candidate."""
    return decide_round(before, {"v1": after}, config, alpha)[0]


def episodes(rates, k, rng):
    """Synthetic probe episodes: task i passes with probability rates[i]."""
    return [
        replace(TEMPLATE, task=task, sample=s, verdict=Verdict.of(rng.random() < rate))
        for task, rate in zip(TASKS, rates, strict=False)
        for s in range(k)
    ]


def noisy_power(config, coupled=False, trials=60):
    """Share of simulated runs (2 levers, 2 rounds) that accept a candidate 30 points better
    on every one of 48 probe tasks whose incumbent success rates lie in 0.1-0.9."""
    return simulate(
        config,
        probe_tasks=48,
        probe_k=1,
        levers=2,
        rounds=2,
        gain=0.3,
        trials=trials,
        base=(0.1, 0.9),
        coupled=coupled,
    )


def test_exact_p_values():
    assert permutation_p_value([1, 1, 1], 100) == pytest.approx(1 / 8)
    assert permutation_p_value([0, 0], 100) == 1.0
    assert permutation_p_value([1, -1], 100) == pytest.approx(3 / 4)


def test_monte_carlo_p_value_matches_exact_for_many_tasks():
    differences = [1.0] * 12 + [-1.0] * 8
    p = permutation_p_value(differences, 20_000, seed=1)
    assert 0.2 < p < 0.35  # exact one-sided binomial tail P(X >= 12 | n=20) = 0.2517


@pytest.mark.parametrize("k", [1, 3])
def test_a_run_of_no_op_levers_is_falsely_accepted_in_at_most_5_percent_of_runs(k):
    rate = simulate(
        GateConfig(resamples=2000), probe_tasks=24, probe_k=k, levers=3, rounds=5, trials=100
    )
    print(f"false-accept rate per run, 3 no-op levers x 5 rounds, k={k}: {rate:.3f}")
    assert rate <= 0.05


def test_shared_random_numbers_remove_the_flips_that_cost_a_better_candidate_its_power():
    config = GateConfig(retest_k=0)
    independent, coupled = noisy_power(config), noisy_power(config, coupled=True)
    print(f"power at +30 points, 48 probe tasks: {independent:.2f} independent, {coupled:.2f}")
    assert coupled > independent and coupled >= 0.95
    same = simulate(GateConfig(), probe_tasks=24, probe_k=1, levers=2, rounds=2, coupled=True)
    assert same == 0.0  # coupled no-op candidates play exactly like the incumbent


def test_holm_shares_the_round_alpha_among_candidates():
    rng = random.Random(11)
    before = episodes([0.3] * 30, 1, rng)
    better = episodes([0.95] * 30, 1, rng)
    same = episodes([0.3] * 30, 1, rng)
    decisions = decide_round(before, {"v1": better, "v2": same, "v3": same}, GateConfig(), 0.05)
    assert [d.accepted for d in decisions] == [True, False, False]
    assert decisions[0].threshold == pytest.approx(0.05 / 3)
    assert winner(decisions) == decisions[0]
    assert round_alpha(GateConfig(alpha=0.05), rounds=5) == pytest.approx(0.01)


def test_a_tiny_probe_says_it_can_never_reach_significance():
    rng = random.Random(2)
    decision = decide(episodes([0.0] * 3, 1, rng), episodes([1.0] * 3, 1, rng), GateConfig())
    assert not decision.accepted
    assert "3 probe tasks can never reach it" in decision.reason


def test_a_clearly_better_candidate_is_accepted():
    rng = random.Random(3)
    decision = decide(episodes([0.2] * 30, 2, rng), episodes([0.9] * 30, 2, rng), GateConfig())
    assert decision.accepted, decision.reason
    assert decision.probe_gain > 0.5 and decision.p_value < 0.001
    assert decision.tasks == 30 and decision.samples == 2


def test_regressions_beyond_the_budget_are_rejected():
    rng = random.Random(5)
    before = episodes([1.0] * 10 + [0.0] * 20, 1, rng)
    after = episodes([0.0] * 10 + [1.0] * 20, 1, rng)
    decision = decide(before, after, GateConfig(flip_budget=0.1))
    assert not decision.accepted
    assert decision.flips_pass_to_fail == 10 and decision.flips_fail_to_pass == 20
    assert "exceed the budget 3" in decision.reason


def retest_episodes(passes_per_task, k=4):
    """Retest episodes: task i passes its first passes_per_task[i] of k samples."""
    return [
        replace(TEMPLATE, task=task, sample=RETEST_FIRST_SAMPLE + s, verdict=Verdict.of(s < n))
        for task, n in zip(TASKS, passes_per_task, strict=False)
        for s in range(k)
    ]


def test_flips_a_retest_does_not_confirm_no_longer_reject_a_better_candidate():
    rng = random.Random(5)
    before = episodes([1.0] * 4 + [0.0] * 20, 1, rng)
    after = episodes([0.0] * 4 + [1.0] * 20, 1, rng)
    config = GateConfig(flip_budget=0.1)
    first = decide(before, after, config)
    assert not first.accepted and "4 pass->fail flips exceed the budget 2" in first.reason
    assert first.flipped == tuple(t.id for t in TASKS[:4]) and first.confirmed_flips is None
    assert retests([first], config) == {"v1": first.flipped}
    assert retests([first], replace(config, retest_k=0)) == {}
    # On the retest the candidate loses only the first task to the incumbent (1 of 4 vs 2 of 4).
    noisy = (retest_episodes([2, 2, 2, 2]), retest_episodes([1, 2, 3, 4]))
    kept = decide_round(before, {"v1": after}, config, 0.05, {"v1": noisy})[0]
    assert kept.accepted and kept.confirmed_flips == 1 and kept.flips_pass_to_fail == 4
    assert "4 pass->fail flips, 1 confirmed by a retest of 4 samples" in kept.reason
    assert retests([kept], config) == {}  # one retest per candidate
    broken = (retest_episodes([3, 3, 3, 3]), retest_episodes([0, 0, 3, 1]))
    rejected = decide_round(before, {"v1": after}, config, 0.05, {"v1": broken})[0]
    assert not rejected.accepted and rejected.confirmed_flips == 3
    assert "3 confirmed by a retest of 4 samples exceed the budget 2" in rejected.reason


def test_only_candidates_their_flips_alone_reject_are_retested():
    rng = random.Random(6)
    before = episodes([1.0] * 4 + [0.0] * 20, 1, rng)
    config = GateConfig(flip_budget=0.1)
    worse = decide(before, episodes([0.0] * 24, 1, rng), config)
    insignificant = decide(before, episodes([0.0] * 4 + [1.0] * 6 + [0.0] * 14, 1, rng), config)
    assert worse.flips_pass_to_fail == insignificant.flips_pass_to_fail == 4
    assert retests([worse, insignificant], config) == {}


def test_retests_buy_power_where_sampling_noise_flips_passes():
    without = noisy_power(GateConfig(retest_k=0, resamples=2000), trials=100)
    retested = noisy_power(GateConfig(retest_k=4, resamples=2000), trials=100)
    print(f"power at +30 points, 48 noisy probe tasks: {without:.2f} -> {retested:.2f} retested")
    assert retested > without + 0.1


def test_unpaired_episodes_are_refused():
    rng = random.Random(0)
    with pytest.raises(ValueError, match="same, non-empty"):
        decide(episodes([0.5] * 30, 1, rng), episodes([0.5] * 29, 1, rng), GateConfig())


SUITE_TASKS = Suite((env, grid)).tasks("probe", 24, difficulty=1)


def played(tasks, passes):
    """One probe episode per task with fixed outcomes."""
    return [
        replace(TEMPLATE, task=task, verdict=Verdict.of(passed))
        for task, passed in zip(tasks, passes, strict=True)
    ]


def gains_on_calc_breaks_grid(grid_flips, tasks=SUITE_TASKS):
    """The incumbent fails every calc task and passes every grid one; the candidate passes
    every calc task and fails the first ``grid_flips`` grid ones."""
    calc = [t.params.get("suite_member", "calc") == "calc" for t in tasks]
    on_grid = [i for i, is_calc in enumerate(calc) if not is_calc]
    before = [not is_calc for is_calc in calc]
    after = [is_calc or i not in on_grid[:grid_flips] for i, is_calc in enumerate(calc)]
    return played(tasks, before), played(tasks, after)


def test_a_gain_on_one_env_cannot_hide_a_regression_on_another():
    config = GateConfig(flip_budget=0.1)
    before, after = gains_on_calc_breaks_grid(grid_flips=2)
    decision = decide(before, after, config)
    # Overall it is a significant gain within the probe's budget (2 flips of 24 allowed) ...
    assert decision.probe_gain > 0.4 and decision.p_value <= decision.threshold
    assert decision.flips_pass_to_fail == 2 == decision.flip_limit
    # ... but grid, 12 episodes of the probe, allows one.
    assert not decision.accepted
    assert (
        "2 pass->fail flips on grid exceed its budget 1 (1.000 -> 0.833 there)" in decision.reason
    )
    groups = {g.group: g for g in decision.groups}
    assert set(groups) == {"calc", "grid"} and all(g.guarded for g in groups.values())
    assert (groups["calc"].incumbent_pass, groups["calc"].candidate_pass) == (0.0, 1.0)
    assert groups["grid"].flips_pass_to_fail == 2 and groups["grid"].episodes == 12
    # One flip on grid is within its budget.
    assert decide(*gains_on_calc_breaks_grid(grid_flips=1), config).accepted


def test_a_single_env_probe_keeps_one_budget_over_its_levels():
    tasks = env.tasks("probe", 12, difficulty=1) + env.tasks("probe", 12, difficulty=2)
    # The same outcomes as above, level 1 in the place of calc and level 2 in that of grid.
    before = played(tasks, [False] * 12 + [True] * 12)
    after = played(tasks, [True] * 12 + [False, False] + [True] * 10)
    decision = decide(before, after, GateConfig(flip_budget=0.1))
    assert decision.accepted, decision.reason
    assert [(g.group, g.guarded, g.flips_pass_to_fail) for g in decision.groups] == [
        ("L1", False, 0),
        ("L2", False, 2),
    ]


def test_an_env_s_flips_are_retested_and_count_only_where_confirmed():
    config = GateConfig(flip_budget=0.1)
    before, after = gains_on_calc_breaks_grid(grid_flips=2)
    first = decide(before, after, config)
    assert retests([first], config) == {"v1": first.flipped} and len(first.flipped) == 2
    flipped = [t for t in SUITE_TASKS if t.id in first.flipped]

    def retest(passes):
        return [
            replace(TEMPLATE, task=task, sample=RETEST_FIRST_SAMPLE + s, verdict=Verdict.of(s < n))
            for task, n in zip(flipped, passes, strict=True)
            for s in range(4)
        ]

    noisy = (retest([2, 2]), retest([2, 3]))  # the candidate loses neither task on the retest
    kept = decide_round(before, {"v1": after}, config, 0.05, {"v1": noisy})[0]
    assert kept.accepted, kept.reason
    broken = (retest([4, 4]), retest([0, 1]))
    rejected = decide_round(before, {"v1": after}, config, 0.05, {"v1": broken})[0]
    assert not rejected.accepted and "on grid, 2 confirmed exceed its budget 1" in rejected.reason


def noisy_solver(success_rate):
    """A fake model that solves a calc task (via its oracle) with the given probability."""

    def reply(prompt, rng):
        shown = {m["content"] for m in prompt.messages if m["role"] == "user"}
        task = next(t for t in TASKS if t.instruction in shown)
        if rng.random() > success_rate:
            return json.dumps({"name": "finish", "arguments": {"answer": "-999"}})
        step = sum(1 for m in prompt.messages if m["role"] == "tool")
        call = env.oracle(task)[step]
        return json.dumps({"name": call.name, "arguments": call.arguments})

    return reply


def test_no_op_candidate_through_real_rollouts_is_rejected():
    agent = Agent(model="fake", temperature=0.7)
    accepted = 0
    for trial in range(20):
        runs = [
            rollout(
                env,
                TASKS[:12],
                agent,
                FakeModel(reply=noisy_solver(0.9), seed=trial * 2 + i),
                k=2,
            )
            for i in range(2)
        ]
        accepted += decide(runs[0], runs[1], GateConfig(resamples=1000)).accepted
    assert accepted <= 1


def test_unreachable_names_the_smallest_p_and_the_probe_size_needed():
    config = GateConfig()
    problem = unreachable(config, probe_tasks=3, rounds=1, candidates=1)
    assert "smallest reachable p-value is 0.125" in problem
    assert "at least 5 probe tasks" in problem
    assert unreachable(config, probe_tasks=5, rounds=1, candidates=1) is None
    assert "at least 7 probe tasks" in unreachable(config, probe_tasks=5, rounds=2, candidates=2)


def test_rounds_added_on_resume_share_only_the_alpha_left():
    config = GateConfig(alpha=0.05)
    # Planned rounds each get their share, however many have run.
    assert round_alpha(config, rounds=4, spent=0.025, done=2) == pytest.approx(0.0125)
    # A 2-round run resumed with 4 rounds spent 0.025 per round: nothing is left.
    assert round_alpha(config, rounds=4, spent=0.05, done=2) == 0.0
    assert round_alpha(config, rounds=3, spent=0.025, done=1) == pytest.approx(0.0125)
    problem = unreachable(config, probe_tasks=48, rounds=3, candidates=1, spent=0.05, done=2)
    assert "spent all of alpha 0.05" in problem
    assert "start a new run" in problem
    assert unreachable(config, probe_tasks=48, rounds=3, candidates=1, spent=0.025, done=1) is None
    tight = unreachable(config, probe_tasks=6, rounds=3, candidates=1, spent=0.04, done=1)
    assert "the alpha 0.01 its 1 rounds so far left, over 2 rounds" in tight


def test_a_round_spent_its_recorded_alpha_or_its_largest_threshold():
    kept = {"p_value": 0.3, "threshold": 0.025}
    assert spent_alpha({"alpha": 0.02, "candidates": [kept]}) == 0.02
    old = {"candidates": [{"p_value": 0.001, "threshold": 0.0125}, kept, {"reason": "none"}]}
    assert spent_alpha(old) == 0.025  # Holm's thresholds end at the round's alpha
    assert spent_alpha({"alpha": 0.02, "candidates": [{"reason": "nothing to propose"}]}) == 0.0


def test_a_round_whose_every_candidate_was_significant_passes_its_alpha_on():
    config = GateConfig(alpha=0.05)
    share = round_alpha(config, rounds=3)
    both = [{"p_value": 0.0001, "threshold": share / 2}, {"p_value": 0.01, "threshold": share}]
    assert spent_alpha({"alpha": share, "candidates": both}) == 0.0
    assert round_alpha(config, rounds=3, spent=0.0, done=1) == pytest.approx(0.025)
    # Holm kept the second (its p-value above its threshold): the round spent its share.
    one = [both[0], {"p_value": 0.02, "threshold": share}]
    assert spent_alpha({"alpha": share, "candidates": one}) == pytest.approx(share)
    assert round_spent(share, [(0.001, share / 2), (0.0, share)]) == 0.0
    assert round_spent(share, [(0.001, share / 2), (share * 1.01, share)]) == share


def test_passing_alpha_on_keeps_a_run_within_its_false_accept_bound():
    # Round 1's candidates are both much better, so it passes its share on; rounds 2 and 3
    # test candidates no better than the incumbent at the larger alpha.
    gains = [[0.5, 0.5], [0.0, 0.0], [0.0, 0.0]]
    simulated = simulate_rounds(GateConfig(), probe_tasks=40, gains=gains, base=(0.1, 0.5))
    assert simulated.accepts_by_round[0] == 1.0
    assert simulated.false_accepts <= 0.05 + 0.03  # alpha, and the simulation's own noise


def outcomes(tasks, passes):
    """One probe episode per task, passed as ``passes`` says."""
    return [
        replace(TEMPLATE, task=task, sample=0, verdict=Verdict.of(passed))
        for task, passed in zip(tasks, passes, strict=True)
    ]


def test_a_probe_grows_until_an_incumbent_near_its_ceiling_leaves_room_for_a_gain():
    config = GateConfig()
    alpha = round_alpha(config, rounds=3)
    tasks = env.tasks("probe", 96)
    # As measured on grid: the incumbent passed 19 of 24, so at most 5 tasks could turn.
    incumbent = [index % 24 not in (2, 7, 12, 17, 22) for index in range(96)]
    perfect = decide(
        outcomes(tasks[:24], incumbent[:24]), outcomes(tasks[:24], [True] * 24), config, alpha
    )
    assert not perfect.accepted and perfect.p_value > alpha
    size = probe_size(24, config, alpha, 19 / 24)
    assert 24 < size <= 72
    before = outcomes(tasks[:size], incumbent[:size])
    assert decide(before, outcomes(tasks[:size], [True] * size), config, alpha).accepted
    # A candidate that fixes half of what the incumbent fails, and breaks nothing, shows.
    failed = [index for index in range(size) if not incumbent[index]]
    half = set(failed[::2])
    fixes_half = [incumbent[index] or index in half for index in range(size)]
    assert decide(before, outcomes(tasks[:size], fixes_half), config, alpha).accepted


def test_the_probe_grows_within_its_bounds_and_only_when_a_gain_could_not_show():
    config = GateConfig()
    assert probe_size(24, config, 0.0167, None) == 24  # no probe yet
    assert probe_size(24, config, 0.0167, 0.0) == 25  # 25 to fail: 6 wins likely at 0.3
    assert probe_size(24, config, 0.0167, 0.5) == 50  # half of them passed: twice that
    assert probe_size(24, config, 0.0167, 1.0) == 72  # nothing left to gain on: the most
    assert probe_size(24, replace(config, smallest_gain=1.0), 0.0167, 0.5) == 24
    assert probe_size(24, replace(config, smallest_gain=1e-4), 1e-6, 0.1) == 72  # the most
    assert probe_size(24, GateConfig(probe_growth=1), 0.0167, 0.95) == 24
    assert probe_size(100, config, 0.0167, 0.9) == 250  # 25 to fail where it fails 1 in 10
    assert probe_size(100, config, 0.0167, 0.5) == 100  # never below the run's own size
    with pytest.raises(ValueError, match="probe_growth"):
        GateConfig(probe_growth=0.5)
    with pytest.raises(ValueError, match="smallest_gain"):
        GateConfig(smallest_gain=0.0)


def test_a_probe_over_a_level_just_opened_is_sized_to_see_a_candidate_that_learned_part_of_it():
    # Half the probe at a level no agent has passed yet; the better candidate passes 0.3 of it
    # and is as good as the incumbent elsewhere (shared seeds: the same outcome there).
    config = GateConfig()
    alpha = round_alpha(config, rounds=3)
    size = probe_size(24, config, alpha / 2, 0.45)
    powers = [
        simulate(
            replace(config, alpha=alpha),
            probe_tasks=tasks,
            probe_k=1,
            levers=2,
            rounds=1,
            gain=0.3,
            base=(0.8, 1.0),
            coupled=True,
            opened=0.5,
            trials=100,
        )
        for tasks in (24, size)
    ]
    assert size > 40
    assert powers[0] < 0.15 and powers[1] > 0.5
