from dataclasses import replace

from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.improve.curriculum import CurriculumConfig, choose_tasks, level_weights

TEMPLATE = replay(env, env.tasks("train", 1)[0], [])


def history(rates_by_level, n=10):
    """Synthetic training episodes: at each level, the given share of n episodes passed."""
    episodes = []
    for level, rate in rates_by_level.items():
        for index, task in enumerate(env.tasks("train", n, seed=level, difficulty=level)):
            passed = index < round(rate * n)
            episodes.append(replace(TEMPLATE, task=task, verdict=Verdict.of(passed)))
    return episodes


def test_frontier_levels_weigh_most():
    weights = level_weights(history({1: 1.0, 2: 0.5, 3: 0.0}), top=5, config=CurriculumConfig())
    assert weights[2] == 1.0
    assert weights[1] == weights[3] == 0.15
    assert 4 not in weights  # level 3 is not solved half the time, so 4 stays closed


def test_the_next_level_opens_once_the_top_one_is_mostly_solved():
    config = CurriculumConfig(start_difficulty=2)
    assert set(level_weights([], top=5, config=config)) == {1, 2}
    assert set(level_weights(history({1: 1.0, 2: 0.6}), top=5, config=config)) == {1, 2, 3}
    capped = CurriculumConfig(start_difficulty=2, max_difficulty=2)
    tasks = choose_tasks(env, history({1: 1.0, 2: 0.9}), 20, seed=0, config=capped)
    assert {t.difficulty for t in tasks} <= {1, 2}


def test_batches_retry_failures_and_draw_fresh_frontier_tasks():
    past = history({1: 1.0, 2: 0.5})
    failed = {t.task.id for t in past if not t.passed}
    tasks = choose_tasks(env, past, 20, seed=3)
    assert len(tasks) == len({t.id for t in tasks}) == 20
    retried = [t for t in tasks if t.id in failed]
    assert len(retried) == 5  # a quarter of the batch
    fresh = [t for t in tasks if t.id not in failed]
    assert sum(t.difficulty == 2 for t in fresh) > sum(t.difficulty == 1 for t in fresh)
    assert choose_tasks(env, past, 20, seed=3) == tasks


def test_proposed_tasks_not_yet_solved_are_mixed_in_up_to_their_share():
    past = history({1: 1.0, 2: 0.5})
    solved = next(t.task for t in past if t.passed)
    proposed = [solved, *env.tasks("train", 12, seed=99, difficulty=1)]
    config = CurriculumConfig(proposed_share=0.25, revisit_share=0.0)
    tasks = choose_tasks(env, past, 20, seed=3, config=config, proposed=proposed)
    mixed = [t for t in tasks if t in proposed]
    assert len(mixed) == 5 and solved not in mixed
    assert len({t.id for t in tasks}) == len(tasks) == 20
