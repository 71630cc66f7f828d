from ratchet.envs.calc import env
from ratchet.envs.grid import env as grid
from ratchet.envs.suite import Suite
from ratchet.improve.probe_groups import flip_limit, group_outcome, pass_to_fail, probe_groups


def keyed(tasks, samples=1):
    """The probe's tasks by id and its paired episodes, ``samples`` per task."""
    return {t.id: t for t in tasks}, [(t.id, s) for t in tasks for s in range(samples)]


def test_one_env_at_one_level_has_no_groups():
    assert probe_groups(*keyed(env.tasks("probe", 6, difficulty=2))) == []


def test_one_env_over_levels_reports_its_levels_unguarded():
    tasks = env.tasks("probe", 3, difficulty=1) + env.tasks("probe", 2, difficulty=3)
    groups = probe_groups(*keyed(tasks, samples=2))
    assert [(name, len(keys), guarded) for name, keys, guarded in groups] == [
        ("L1", 6, False),
        ("L3", 4, False),
    ]


def test_a_suite_guards_each_env_and_each_level_of_an_env_over_several():
    # Round-robin over the members: calc L1, grid L1, calc L2, grid L2, calc L3, grid L3.
    groups = probe_groups(*keyed(Suite((env, grid)).tasks("probe", 6), samples=2))
    assert [(name, len(keys), guarded) for name, keys, guarded in groups] == [
        ("calc", 6, True),
        ("calc L1", 2, True),
        ("calc L2", 2, True),
        ("calc L3", 2, True),
        ("grid", 6, True),
        ("grid L1", 2, True),
        ("grid L2", 2, True),
        ("grid L3", 2, True),
    ]


def test_the_flip_limit_is_a_share_of_the_episodes_but_never_below_one():
    assert flip_limit(0.1, 5) == 1
    assert flip_limit(0.1, 29) == 2
    assert flip_limit(0.25, 40) == 10


def test_a_group_counts_its_own_flips_and_after_a_retest_only_confirmed_ones():
    before = {("a", 0): True, ("a", 1): True, ("b", 0): True, ("c", 0): False}
    after = {("a", 0): False, ("a", 1): False, ("b", 0): False, ("c", 0): True}
    assert pass_to_fail(before, after, before) == [("a", 0), ("a", 1), ("b", 0)]
    group = ("calc", frozenset(before), True)
    sampled = group_outcome(group, before, after, None, flip_budget=0.1)
    assert (sampled.episodes, sampled.flips_pass_to_fail, sampled.flip_limit) == (4, 3, 1)
    assert (sampled.incumbent_pass, sampled.candidate_pass) == (0.75, 0.25)
    assert sampled.confirmed_flips is None and sampled.over_budget
    retested = group_outcome(group, before, after, {"b"}, flip_budget=0.1)
    assert retested.confirmed_flips == 1 and not retested.over_budget
    reported = group_outcome(("L1", frozenset(before), False), before, after, None, 0.1)
    assert reported.flips_pass_to_fail == 3 and not reported.over_budget


def test_group_outcome_still_imports_from_the_gate_its_old_home():
    from ratchet.improve import probe_groups
    from ratchet.improve.gate import GroupOutcome

    assert GroupOutcome is probe_groups.GroupOutcome
