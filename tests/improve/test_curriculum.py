from dataclasses import replace

from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.improve.curriculum import CurriculumConfig, choose_tasks, open_levels, probe_rates
from ratchet.improve.hindsight import REPLAY_SAMPLES

TEMPLATE = replay(env, env.tasks("train", 1)[0], [])


def episodes(rates_by_level, n=10, split="train", family=None):
    """Synthetic episodes: at each level, the given share of n episodes passed."""
    made = []
    for level, rate in rates_by_level.items():
        for index, task in enumerate(env.tasks(split, n, seed=level, difficulty=level)):
            task = task if family is None else replace(task, family=family)
            passed = index < round(rate * n)
            made.append(replace(TEMPLATE, task=task, verdict=Verdict.of(passed)))
    return made


def relabelled(sources, tasks):
    """Hindsight's verified replays of the failed ``sources``, one on each of ``tasks``."""
    return [
        replace(
            e,
            task=task,
            verdict=Verdict.of(True),
            sample=REPLAY_SAMPLES + e.sample,
            metadata={"hindsight": True, "source_task": e.task.id},
        )
        for e, task in zip(sources, tasks, strict=True)
    ]


def test_a_level_opens_when_the_incumbent_passes_0_3_of_the_one_below_on_the_probe():
    config = CurriculumConfig()
    assert open_levels({}, top=5, config=config) == 1
    assert open_levels({1: 0.25}, top=5, config=config) == 1
    assert open_levels({1: 0.3}, top=5, config=config) == 2
    assert open_levels({1: 0.8}, top=5, config=config) == 2
    assert open_levels({1: 0.8, 2: 0.9, 3: 0.1}, top=5, config=config) == 3
    assert open_levels({1: 0.8, 2: 0.2}, top=5, config=config) == 2
    assert open_levels({1: 0.8, 2: 0.9}, top=2, config=config) == 2
    assert open_levels({2: 1.0}, top=5, config=config) == 1  # mastery must start at the bottom
    assert probe_rates(episodes({1: 0.8, 2: 0.2}, split="probe")) == {1: 0.8, 2: 0.2}


def test_a_level_opens_when_practice_there_gave_lessons_on_0_3_of_its_tasks():
    few = choose_tasks(env, episodes({1: 0.2}), 12, seed=0)
    assert few.note["open_to"] == 1 and {t.difficulty for t in few.tasks} == {1}
    enough = choose_tasks(env, episodes({1: 0.3}), 12, seed=0)
    assert enough.note["open_to"] == 2 and enough.note["lessons"] == {"1": 0.3}
    assert 2 in {t.difficulty for t in enough.tasks}
    # Failures hindsight relabelled at their level are lessons too; the probe can lag them.
    failed = episodes({1: 0.0, 2: 0.0})
    level2 = [e for e in failed if e.task.difficulty == 2]
    relabels = relabelled(level2[:4], env.tasks("train", 4, seed=13, difficulty=2))
    probe = episodes({1: 0.9, 2: 0.0}, split="probe")
    lagging = choose_tasks(env, failed + relabels, 12, seed=0, probe=probe)
    assert lagging.note["lessons"] == {"1": 0.0, "2": 0.4} and lagging.note["open_to"] == 3
    # One level a round: a level opens only on what was probed or practised below it.
    assert choose_tasks(env, episodes({1: 1.0}), 12, 0, probe=probe).note["open_to"] == 2
    capped = CurriculumConfig(max_difficulty=1)
    assert choose_tasks(env, episodes({1: 1.0}), 12, 0, capped, probe).note["open_to"] == 1


def test_frontier_levels_get_most_of_the_fresh_tasks():
    probe = episodes({1: 0.9, 2: 0.9}, split="probe")
    history = episodes({1: 1.0, 2: 0.5, 3: 0.0})
    choice = choose_tasks(env, history, 40, seed=1, probe=probe)
    assert choice.note["levels"] == {"1": 0.15, "2": 1.0, "3": 0.15}
    fresh = choice.tasks[choice.note["revisits"] :]
    counts = {level: sum(t.difficulty == level for t in fresh) for level in (1, 2, 3)}
    assert counts[2] > counts[1] and counts[2] > counts[3]


def test_success_rates_are_the_incumbents_own_once_it_has_played():
    # The base failed level 1; v1 masters it and passes level 2 now and then.
    base = episodes({1: 0.0})
    v1 = [replace(t, agent="v1") for t in episodes({1: 1.0, 2: 0.1})]
    probe = episodes({1: 1.0}, split="probe")
    pooled = choose_tasks(env, base + v1, 40, seed=1, probe=probe)
    assert pooled.note["levels"] == {"1": 1.0, "2": 0.36}  # level 1 looks half solved
    own = choose_tasks(env, base + v1, 40, seed=1, probe=probe, incumbent="v1")
    assert own.note["levels"] == {"1": 0.15, "2": 0.36}
    fresh = own.tasks[own.note["revisits"] :]
    assert sum(t.difficulty == 2 for t in fresh) > sum(t.difficulty == 1 for t in fresh)
    # An incumbent that has not played yet is judged by its probe where it has one, by
    # everyone's episodes elsewhere.
    new = choose_tasks(env, base + v1, 40, 1, probe=probe, incumbent="v2")
    assert new.note["levels"] == {"1": 0.15, "2": 0.36}


def test_fresh_tasks_favour_the_family_on_its_frontier():
    # Every calc family at level 1 is mastered but one, which is solved half the time.
    families = sorted({t.family for t in env.tasks("train", 60, difficulty=1)})
    assert len(families) > 1
    frontier = families[0]
    history = [
        episode
        for family in families
        for episode in episodes({1: 0.5 if family == frontier else 1.0}, family=family)
    ]
    config = CurriculumConfig(revisit_share=0.0, max_difficulty=1)
    choice = choose_tasks(env, history, 30, seed=2, config=config)
    share = sum(t.family == frontier for t in choice.tasks) / len(choice.tasks)
    assert choice.note["families"][f"{frontier}@1"] > 0.9
    assert share > 1 / len(families)


def test_revisits_prefer_tasks_solved_sometimes_and_draws_repeat():
    history = episodes({1: 0.0}, n=20) + episodes({1: 1.0}, n=20)
    mixed = env.tasks("train", 6, seed=99, difficulty=1)
    for task in mixed:
        for passed in (True, False, True, False):
            history.append(replace(TEMPLATE, task=task, verdict=Verdict.of(passed)))
    choice = choose_tasks(env, history, 24, seed=3)
    revisits = choice.tasks[: choice.note["revisits"]]
    assert choice.note["revisits"] == 6
    assert sum(t.id in {m.id for m in mixed} for t in revisits) >= 3
    assert len({t.id for t in choice.tasks}) == 24
    assert choose_tasks(env, history, 24, seed=3) == choice


def test_hindsight_replays_do_not_count_as_success():
    replays = [replace(e, metadata={"hindsight": True}) for e in episodes({1: 1.0})]
    choice = choose_tasks(env, replays, 10, seed=0)
    assert choice.note["levels"] == {"1": 1.0}  # unknown, not mastered
    assert choice.note["revisits"] == 0


def test_proposed_tasks_not_yet_solved_are_mixed_in_up_to_their_share():
    past = episodes({1: 1.0, 2: 0.5})
    solved = next(t.task for t in past if t.passed)
    proposed = [solved, *env.tasks("train", 12, seed=99, difficulty=1)]
    config = CurriculumConfig(proposed_share=0.25, revisit_share=0.0)
    choice = choose_tasks(env, past, 20, seed=3, config=config, proposed=proposed)
    tasks = choice.tasks
    assert choice.note["proposed"] == 5
    mixed = [t for t in tasks if t in proposed]
    assert len(mixed) == 5 and solved not in mixed
    assert len({t.id for t in tasks}) == len(tasks) == 20


def test_a_level_where_practice_makes_lessons_is_not_left_at_the_floor():
    # The agent passes 70% of level 1 and none of level 2 itself, but hindsight relabelled
    # six of ten level-2 failures into level-2 lessons.
    history = episodes({1: 0.7, 2: 0.0})
    level2 = [e for e in history if e.task.difficulty == 2]
    relabels = relabelled(level2[:6], env.tasks("train", 6, seed=11, difficulty=2))
    probe = episodes({1: 0.9}, split="probe")
    config = CurriculumConfig(max_difficulty=2)
    plain = choose_tasks(env, history, 40, seed=1, config=config, probe=probe)
    taught = choose_tasks(env, history + relabels, 40, seed=1, config=config, probe=probe)
    assert plain.note["levels"] == {"1": 0.84, "2": 0.15}
    assert taught.note["levels"] == {"1": 0.84, "2": 0.6}
    assert taught.note["lessons"] == {"1": 0.7, "2": 0.6}

    def level2_share(choice):
        fresh = choice.tasks[choice.note["revisits"] :]
        return sum(t.difficulty == 2 for t in fresh) / len(fresh)

    assert level2_share(taught) > level2_share(plain) + 0.15


def test_a_new_incumbent_weighs_a_level_it_has_not_practised_by_its_probe():
    # The base failed level 1 while hindsight taught it; v2 passes 0.9 of it on the probe.
    history = episodes({1: 0.0})
    relabels = relabelled(history, env.tasks("train", 10, seed=12, difficulty=1))
    probe = [replace(e, agent="v2") for e in episodes({1: 0.9}, split="probe")]
    inherited = choose_tasks(env, history + relabels, 40, seed=1, probe=probe)
    own = choose_tasks(env, history + relabels, 40, seed=1, probe=probe, incumbent="v2")
    assert inherited.note["levels"] == {"1": 1.0, "2": 1.0}  # the base's rate 0, lessons 1.0
    assert own.note["levels"] == {"1": 0.36, "2": 1.0}  # 4 * 0.9 * 0.1
    practised = [replace(e, agent="v2") for e in episodes({1: 0.5})]
    played = choose_tasks(env, practised, 40, seed=1, probe=probe, incumbent="v2")
    assert played.note["levels"]["1"] == 1.0  # its own training rate, 0.5, once it has one
