from dataclasses import replace

from ratchet.core.agent import Agent
from ratchet.core.task import split_of
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.improve.hindsight import (
    REPLAY_SAMPLES,
    episode_key,
    lessons,
    relabel,
    relabel_all,
    sources,
    trim,
)

TASK = env.tasks("train", 1, difficulty=3)[0]
AGENT = Agent(model="fake")


def calls(*specs):
    return [ToolCall(name, arguments) for name, arguments in specs]


def test_every_prefix_of_an_unfinished_exploration_is_a_verified_success_or_held_out():
    wandering = replay(
        env,
        TASK,
        calls(
            ("add", {"a": 2, "b": 33}), ("add", {"a": 2, "b": 33}), ("multiply", {"a": 35, "b": 2})
        ),
    )
    assert not wandering.passed and not wandering.terminated
    result = relabel(env, wandering, AGENT)
    assert len(result.successes) + len(result.held_out) == 2  # (2 + 33) * 2, and 2 + 33 alone
    chains = {len(r.task.params["steps"]): r for r in result.successes}
    for relabelled in result.successes:
        assert relabelled.passed and relabelled.task.split == "train"
        assert split_of(relabelled.task.problem) == "train"
        assert relabelled.messages[0]["role"] == "system"
        assert relabelled.metadata == {"hindsight": True, "source_task": TASK.id}
        assert relabelled.steps[-1].call.name == "finish"
    if 2 in chains:
        assert chains[2].task.params == {
            "start": 2,
            "steps": [["add", 33], ["multiply", 2]],
            "answer": 70,
        }
        assert [s.call.name for s in chains[2].steps] == ["add", "multiply", "finish"]


def test_a_wrong_submission_still_teaches_what_its_prefix_did():
    wrong = replay(env, TASK, calls(("add", {"a": 1, "b": 2}), ("finish", {"answer": "7"})))
    assert wrong.terminated
    result = relabel(env, wrong, AGENT)
    assert len(result.successes) + len(result.held_out) == 1
    for success in result.successes:
        assert success.task.params["answer"] == 3
        assert success.steps[-1].call.arguments == {"answer": "3"}


def test_a_held_out_task_counts_once_however_often_it_is_described():
    episodes = (replay(env, TASK, calls(("add", {"a": 2, "b": b}))) for b in range(1, 300))
    episode = next(e for e in episodes if relabel(env, e, AGENT).held_out)
    # Two samples that did the same thing describe the same held-out task twice.
    both = relabel_all(env, [episode, episode], AGENT, max_difficulty=3)
    assert both.held_out == relabel(env, episode, AGENT).held_out
    assert len(both.held_out) == 1


def test_successes_and_empty_episodes_give_nothing():
    solved = replay(env, TASK, env.oracle(TASK))
    assert relabel(env, solved, AGENT).successes == ()
    nothing = relabel(env, replay(env, TASK, []), AGENT)
    assert nothing.successes == () and not nothing.held_out


def test_relabel_all_keeps_one_success_per_task_within_the_difficulty_cap():
    explorations = [
        replay(
            env, task, calls(("add", {"a": 40 + i, "b": 1}), ("multiply", {"a": 41 + i, "b": 3}))
        )
        for i, task in enumerate(env.tasks("train", 20, difficulty=2))
    ]
    both = relabel_all(env, explorations + explorations, AGENT, max_difficulty=2)
    capped = relabel_all(env, explorations, AGENT, max_difficulty=1)
    assert len({t.task.id for t in both.successes}) == len(both.successes) > 0
    assert capped.successes and all(t.task.difficulty == 1 for t in capped.successes)


def test_a_skill_call_is_relabelled_through_the_env_calls_it_made():
    from ratchet.core.memory import Skill, SkillStep
    from ratchet.engine.harness import run_episode, scripted

    skill = Skill(
        "add_then_finish",
        "",
        "calc",
        {"a": {"type": "number"}, "b": {"type": "number"}},
        (
            SkillStep("add", {"a": {"param": "a"}, "b": {"param": "b"}}),
            SkillStep("finish", {"answer": {"result": 0}}),
        ),
    )
    found = None
    for a in range(2, 60):  # a sum whose problem is in train (others are held out)
        episode = run_episode(
            env, TASK, AGENT, scripted(calls(("add_then_finish", {"a": a, "b": 5}))), skills=[skill]
        )
        found = relabel(env, episode, AGENT).successes
        if found:
            break
    assert not episode.passed and found
    assert [c.name for c in found[0].calls] == ["add", "finish"]  # replayable without the skill


def test_a_replay_on_its_sources_own_task_is_stored_beside_the_failure(tmp_path):
    from ratchet.engine.store import Store
    from ratchet.envs.files import env as files

    task = next(t for t in files.tasks("train", 20, difficulty=1) if t.family == "lookup")
    read = files.oracle(task)[0]  # read_value of the asked key, then no finish
    unfinished = replace(replay(files, task, [read, read]), sample=3)
    assert not unfinished.passed
    result = relabel(files, unfinished, AGENT)
    same = [s for s in result.successes if s.task.id == task.id]
    assert same and same[0].sample == REPLAY_SAMPLES + 3 and same[0].passed
    with Store(tmp_path) as store:
        run = store.start_run("improve", {})
        store.add_trajectories(run, [unfinished, *result.successes])
        stored = [t for _, t in store.trajectories(run)]
    assert sorted(t.passed for t in stored if t.task.id == task.id) == [False, True]


def test_an_episode_cut_off_by_its_budget_is_relabelled_only_with_a_finish():
    from ratchet.envs.files import env as files

    tasks = [t for t in files.tasks("train", 40, difficulty=1) if t.family == "lookup"]
    # Asked for a value, it moved the file it should have read, then its turns ran out.
    moves = [
        ToolCall("move_file", {"source": path, "destination": "old/"})
        for path in (t.params["reads"][0]["arguments"]["path"] for t in tasks)
    ]
    cut_off = [replay(files, task, [move]) for task, move in zip(tasks, moves, strict=True)]
    assert not any(t.passed or t.steps[-1].observation.done for t in cut_off)
    results = [relabel(files, t, AGENT) for t in cut_off]
    successes = [s for r in results for s in r.successes]
    assert len(successes) + sum(len(r.held_out) for r in results) == len(tasks) > 0
    assert successes and all(s.passed for s in successes)
    assert all(s.steps[-1].call.name == "finish" for s in successes)


def test_each_task_is_taught_by_the_shortest_prefix_that_solves_it():
    from ratchet.envs.grid import env as grid

    def items_here(task):
        return [name for name, room in task.params["items"] if room == task.params["start"]]

    taught = {}
    for task in grid.tasks("train", 200, difficulty=1):
        if task.family != "go" or len(items_here(task)) < 2:
            continue
        # Asked to walk, it took two items: what it did is "fetch the first", in one take.
        first, second = items_here(task)[:2]
        greedy = replay(grid, task, calls(("take", {"item": first}), ("take", {"item": second})))
        assert not greedy.passed
        taught = {s.task.params["goal"]["item"]: s for s in relabel(grid, greedy, AGENT).successes}
        if taught:  # else the fetch task's problem is held out for the probe or test
            break
    assert [(c.name, c.arguments) for c in taught[first].calls] == [
        ("take", {"item": first}),
        ("finish", {"answer": f"You pick up the {first}."}),
    ]


def test_a_success_that_acted_on_is_trimmed_and_its_trim_is_the_lesson():
    from ratchet.envs.grid import env as grid

    task = next(
        t
        for t in grid.tasks("train", 200, difficulty=1)
        if t.family == "fetch"
        and sum(room == t.params["start"] for _, room in t.params["items"]) >= 2
    )
    asked = task.params["goal"]["item"]
    other = next(
        name
        for name, room in task.params["items"]
        if room == task.params["start"] and name != asked
    )
    # It took the asked item, then another, and its turns ran out: passed, never finished.
    greedy = replace(
        replay(grid, task, calls(("take", {"item": asked}), ("take", {"item": other}))), sample=2
    )
    assert greedy.passed and not greedy.terminated
    trimmed = trim(grid, greedy, AGENT)
    assert trimmed is not None and trimmed.passed and trimmed.task.id == task.id
    assert [c.name for c in trimmed.calls] == ["take", "finish"]
    assert trimmed.sample == REPLAY_SAMPLES + 2 and trimmed.metadata["hindsight"]
    assert trim(grid, replay(grid, task, grid.oracle(task)), AGENT) is None  # nothing to cut
    batch = relabel_all(grid, [greedy], AGENT, max_difficulty=1)
    assert batch.trimmed == 1 and [t.calls for t in batch.successes] == [trimmed.calls]
    solved_elsewhere = replay(grid, task, grid.oracle(task))
    assert lessons([greedy, trimmed, solved_elsewhere]) == [trimmed, solved_elsewhere]


def test_a_failure_is_a_source_only_with_a_lesson_at_its_own_level_or_above():
    task = env.tasks("train", 1, difficulty=2)[0]
    start = task.params["start"]
    two = replay(
        env, task, calls(("add", {"a": start, "b": 2}), ("multiply", {"a": start + 2, "b": 2}))
    )
    one = replace(replay(env, task, calls(("add", {"a": start, "b": 5}))), sample=1)
    # Both give a level-1 lesson (their first call); only the first gives one at level 2.
    assert {s.task.difficulty for s in relabel(env, two, AGENT).successes} == {1, 2}
    assert {s.task.difficulty for s in relabel(env, one, AGENT).successes} == {1}
    found = relabel_all(env, [two, one], AGENT, max_difficulty=2).successes
    assert sources([two, one, *found]) == {episode_key(two)}
    assert sources(found) == set()  # a source not among the episodes has no known level
