from dataclasses import replace

import pytest

from ratchet.core.trajectory import Exploration
from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.improve.frontier import (
    FLOOR,
    HOTTEST,
    SuccessRates,
    explore_temperatures,
    frontier_weight,
    lesson_rates,
    level_weight,
)
from ratchet.improve.hindsight import REPLAY_SAMPLES

TASKS = env.tasks("train", 4, difficulty=1)
TEMPLATE = replay(env, TASKS[0], [])


def episode(task, passed, exploration=None, **metadata):
    return replace(
        TEMPLATE, task=task, verdict=Verdict.of(passed), metadata=metadata, exploration=exploration
    )


def test_a_task_rate_is_shrunk_toward_its_family_and_level():
    history = [episode(TASKS[0], True), episode(TASKS[0], True)]
    history += [episode(TASKS[1], False) for _ in range(6)]
    rates = SuccessRates.of(history)
    assert rates.level(1) == 0.25
    assert rates.level(2) is None and rates.task(env.tasks("train", 1, difficulty=2)[0]) is None
    solved = rates.task(TASKS[0])
    assert solved is not None and rates.level(1) < solved < 1.0
    unseen = rates.task(TASKS[3])
    assert unseen == rates.cell(TASKS[3].family, 1)


def test_hindsight_replays_and_crashes_are_not_counted():
    history = [
        episode(TASKS[0], True, hindsight=True),
        replace(episode(TASKS[1], False), verdict=None),
    ]
    rates = SuccessRates.of(history)
    assert rates.levels == {} and rates.task(TASKS[0]) is None


def test_steered_or_branched_episodes_are_not_the_agents_own_and_are_not_counted():
    own = [episode(TASKS[0], True), episode(TASKS[0], True, Exploration(temperature=0.9))]
    steered = [
        episode(TASKS[0], False, Exploration(strategy="drawn")),
        episode(TASKS[0], False, Exploration(parent=0, branch_turn=1)),
        episode(TASKS[0], False, hindsight=True),
    ]
    rates = SuccessRates.of(own + steered)
    assert rates.levels == {1: (2, 2)} and rates.tasks == {TASKS[0].id: (2, 2)}


def test_the_frontier_weighs_most_and_never_zero():
    assert frontier_weight(0.5) == 1.0
    assert frontier_weight(0.0) == frontier_weight(1.0) == FLOOR
    assert frontier_weight(None) == 1.0


def test_temperatures_warm_up_with_success_and_spread_over_the_samples():
    cold = explore_temperatures(0.0, 4, usual=0.7)
    assert cold == sorted(cold) and len(set(cold)) == 4
    assert cold[0] == pytest.approx(0.5) and cold[-1] == pytest.approx(0.9)
    assert explore_temperatures(None, 2, usual=0.7) == explore_temperatures(0.0, 2, usual=0.7)
    assert explore_temperatures(1.0, 3, usual=0.7) == [HOTTEST] * 3
    middle = explore_temperatures(0.5, 2, usual=0.7)
    assert 0.7 < sum(middle) / 2 < HOTTEST and middle[0] < middle[1]
    assert explore_temperatures(0.0, 1, usual=0.7) == [0.7]


def test_a_level_is_weighed_by_its_lessons_where_the_agent_cannot_start_it():
    level2 = env.tasks("train", 4, seed=5, difficulty=2)
    own = [episode(task, False) for task in level2]
    branch = replace(
        episode(level2[0], True, Exploration(strategy="chain", parent=0, branch_turn=1)), sample=3
    )

    def replay_of(source, difficulty):
        task = env.tasks("train", 1, seed=9, difficulty=difficulty)[0]
        relabelled = episode(task, True, hindsight=True, source_task=source.id)
        return replace(relabelled, sample=REPLAY_SAMPLES)

    # Task 0 passed by a branch, task 1 relabelled at level 2, task 2 only at level 1.
    history = [*own, branch, replay_of(level2[1], 2), replay_of(level2[2], 1)]
    agent = TEMPLATE.agent
    assert lesson_rates(history, agent) == {2: 0.5}  # replays are lessons, not practice
    assert SuccessRates.of(history).level(2) == 0.0  # the agent's own samples all failed
    assert level_weight(0.0, 0.5) == 0.5 > frontier_weight(0.0)
    assert level_weight(0.75, 1.0) == frontier_weight(0.75)  # its own lessons teach it less
    assert level_weight(None, None) == 1.0
    assert lesson_rates(history, "someone else") == lesson_rates(history, agent)
