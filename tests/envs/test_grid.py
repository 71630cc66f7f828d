import random
from collections import Counter

import pytest

from fakes import describe_task
from ratchet.core.serialise import from_json, to_json
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall, ToolError
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import replay
from ratchet.envs.check import FORGED_CLAIM, check_env
from ratchet.envs.grid import env
from ratchet.envs.grid import world as rules
from ratchet.envs.grid.generate import MAX_DIFFICULTY
from ratchet.envs.grid.goals import achieved
from ratchet.envs.grid.tools import build

WORLD = {
    "rooms": [["red", 0, 0], ["blue", 1, 0], ["green", 1, 1]],
    "doors": [["red", "blue", "brass"], ["blue", "green", None]],
    "items": [
        ["brass key", "red"],
        ["iron key", "red"],
        ["wood", "red"],
        ["stone", "green"],
        ["cup", "blue"],
    ],
    "start": "red",
}
CRAFT_AXE = [
    ToolCall("take", {"item": "wood"}),
    ToolCall("take", {"item": "brass key"}),
    ToolCall("use", {"item": "brass key", "target": "east"}),
    ToolCall("move", {"to": "blue room"}),
    ToolCall("move", {"to": "south"}),
    ToolCall("take", {"item": "stone"}),
    ToolCall("craft", {"item": "axe"}),
]


def task_for(goal: dict, instruction: str = "Do it.") -> Task:
    params = {**WORLD, "goal": goal}
    return Task(
        "grid-t", "grid", instruction, "test", family=goal["kind"], difficulty=4, params=params
    )


def finish(answer: str = "done") -> ToolCall:
    return ToolCall("finish", {"answer": answer})


def session_for(goal: dict):
    session = env.session(task_for(goal))
    session.reset()
    return session


def test_look_shows_only_the_current_room():
    session = session_for({"kind": "go", "room": "green"})
    seen = session.step(ToolCall("look", {})).text
    assert seen == (
        "You are in the red room. You see: brass key, iron key, wood. "
        "Doors: east to the blue room (locked: brass lock)."
    )
    assert "stone" not in seen and "cup" not in seen and "green" not in seen
    for call in CRAFT_AXE[1:4]:
        assert session.step(call).error is None
    assert "You see: cup." in session.step(ToolCall("look", {})).text


def test_a_locked_door_opens_only_with_the_key_of_its_metal():
    session = session_for({"kind": "go", "room": "blue"})
    blocked = session.step(ToolCall("move", {"to": "east"}))
    assert blocked.error and "locked" in blocked.error
    assert session.step(ToolCall("use", {"item": "brass key", "target": "east"})).error
    session.step(ToolCall("take", {"item": "iron key"}))
    wrong = session.step(ToolCall("use", {"item": "iron key", "target": "blue room"}))
    assert (
        wrong.error
        == "the iron key does not fit the door east to the blue room: it has a brass lock"
    )
    session.step(ToolCall("take", {"item": "brass key"}))
    opened = session.step(ToolCall("use", {"item": "brass key", "target": "blue room"}))
    assert opened.text == "You unlock the door east to the blue room with the brass key."
    assert session.step(ToolCall("move", {"to": "blue room"})).text.startswith("You walk east.")
    assert session.verify().passed


def test_unknown_targets_list_the_doors():
    session = session_for({"kind": "go", "room": "blue"})
    error = session.step(ToolCall("move", {"to": "north"})).error
    assert error == "there is no door north of the red room; doors: east to the blue room"
    assert session.step(ToolCall("move", {"to": "green room"})).error == (
        "there is no door of the red room to the green room; doors: east to the blue room"
    )
    assert session.step(ToolCall("take", {"item": "stone"})).error  # it is in another room
    assert session.step(ToolCall("drop", {"item": "wood"})).error  # not held


def test_crafting_needs_held_ingredients_and_uses_them_up():
    session = session_for({"kind": "craft", "item": "axe"})
    for call in CRAFT_AXE[:-2]:
        assert session.step(call).error is None
    early = session.step(ToolCall("craft", {"item": "axe"}))
    assert early.error == "an axe needs the wood and the stone; you are missing the stone"
    assert session.step(ToolCall("craft", {"item": "spaceship"})).error
    session.step(CRAFT_AXE[-2])
    assert session.step(CRAFT_AXE[-1]).text == "You craft an axe from the wood and the stone."
    assert session.step(ToolCall("inventory", {})).text == "You hold: axe, brass key."
    assert session.verify().passed


def test_the_verifier_reads_the_world_not_the_answer():
    task = task_for({"kind": "bring", "item": "cup", "room": "red"})
    plan = env.oracle(task)
    assert [c.name for c in plan] == ["take", "use", "move", "take", "move", "drop", "finish"]
    assert replay(env, task, plan).passed
    assert not replay(env, task, [*plan[:-2], finish()]).passed  # cup still held
    assert not replay(env, task, [finish("")]).passed
    assert not replay(env, task, [finish(FORGED_CLAIM)]).passed
    verdict = replay(env, task, [*plan[:-2], finish()]).verdict
    assert verdict is not None
    assert verdict.feedback == (
        "goal not reached: the cup is in your inventory; the goal is to leave it in the red room"
    )


def test_difficulty_is_the_length_of_the_oracle_plan():
    for level in range(1, MAX_DIFFICULTY + 1):
        for task in env.tasks("train", 8, difficulty=level):
            plan = env.oracle(task)
            assert len(plan) - 1 == level
            assert replay(env, task, plan).passed


def test_level_one_is_one_move_or_one_take_in_sight():
    for task in env.tasks("test", 40, difficulty=1):
        (action, _) = env.oracle(task)
        assert action.name in ("move", "take")
        assert str(next(iter(action.arguments.values()))) in task.instruction


def all_moves(layout, state):
    """Every action the rules allow, not only the ones the planner considers."""
    attempts = [lambda e=e: rules.go(layout, state, e) for e in layout.exits[state.room]]
    for item in range(len(layout.items)):
        attempts += [
            lambda i=item: rules.take(layout, state, i),
            lambda i=item: rules.drop(layout, state, i),
        ]
        attempts += [
            lambda i=item, e=e: rules.unlock(layout, state, i, e) for e in layout.exits[state.room]
        ]
    attempts += [lambda p=p: rules.craft(layout, state, p) for p in rules.RECIPES]
    for attempt in attempts:
        try:
            yield attempt()
        except ToolError:
            continue


def test_no_shorter_plan_exists_among_all_actions():
    for level in (1, 2, 3):
        for task in env.tasks("train", 8, difficulty=level):
            world = build(task)
            length = len(env.oracle(task)) - 1
            frontier, seen = {world.start}, {world.start}
            for _ in range(length - 1):
                frontier = {s for f in frontier for s in all_moves(world.layout, f)} - seen
                seen |= frontier
                assert not any(achieved(world.goal, s) for s in frontier), task.id


def test_goal_kinds_and_levels_are_all_drawn():
    tasks = env.tasks("train", 250)
    assert set(Counter(t.family for t in tasks)) == {"fetch", "craft", "bring", "go", "unlock"}
    assert set(Counter(t.difficulty for t in tasks)) == set(range(1, MAX_DIFFICULTY + 1))


def test_many_distinct_tasks_per_split():
    tasks = env.tasks("train", 500)
    assert len({(t.instruction, repr(t.params)) for t in tasks}) == 500


@pytest.mark.slow
def test_thousands_of_distinct_tasks_in_every_split():
    for split in ("train", "probe", "test"):
        tasks = env.tasks(split, 2000)
        assert len({(t.instruction, repr(t.params)) for t in tasks}) == 2000


def test_deterministic_and_json_round_trip():
    tasks = env.tasks("probe", 10, seed=3)
    assert tasks == env.tasks("probe", 10, seed=3)
    assert tasks != env.tasks("probe", 10, seed=4)
    for task in tasks:
        again = from_json(Task, to_json(task))
        calls = [ToolCall("look", {}), *env.oracle(task)]
        first, second = replay(env, task, calls), replay(env, again, calls)
        assert [s.observation for s in first.steps] == [s.observation for s in second.steps]


def test_malformed_params_are_a_clear_error():
    bad = Task("grid-x", "grid", "Go.", "test", params={"rooms": [["red", 0, 0]]})
    with pytest.raises(ValueError, match="grid params are malformed"):
        env.session(bad)
    twice = {
        **WORLD,
        "items": [["cup", "red"], ["cup", "blue"]],
        "goal": {"kind": "go", "room": "blue"},
    }
    with pytest.raises(ValueError, match="names must be unique"):
        env.session(Task("grid-y", "grid", "Go.", "test", params=twice))


def test_check_env_passes():
    report = check_env(env, n=15, split_draws=100)
    assert report.passed, report.results


@pytest.mark.slow
def test_check_env_passes_on_200_tasks():
    report = check_env(env, n=200)
    assert report.passed, report.results


def test_relabelling_names_what_was_crafted_and_where_things_were_left():
    crafted = describe_task(env, replay(env, task_for({"kind": "go", "room": "green"}), CRAFT_AXE))
    assert crafted is not None
    assert crafted.family == "craft" and crafted.params["goal"] == {"kind": "craft", "item": "axe"}
    assert crafted.instruction == (
        "You are in the red room. You see: brass key, iron key, wood. Doors: east to the blue "
        "room (locked: brass lock). Craft an axe and keep it in your inventory. Call finish "
        "when you are done."
    )
    assert crafted.difficulty == 7  # its shortest plan takes seven actions
    wander = [*CRAFT_AXE[1:4], ToolCall("drop", {"item": "brass key"}), finish()]
    brought = describe_task(env, replay(env, task_for({"kind": "go", "room": "green"}), wander))
    assert brought is not None
    assert brought.params["goal"] == {"kind": "bring", "item": "brass key", "room": "blue"}
    assert (
        describe_task(env, replay(env, task_for({"kind": "go", "room": "green"}), [finish()]))
        is None
    )


def test_oracle_trajectories_relabel_to_tasks_the_verifier_passes():
    for task in env.tasks("test", 25):
        described = describe_task(env, replay(env, task, env.oracle(task)))
        assert described is not None
        assert replay(env, described, env.oracle(described)).passed


def explore(task: Task, rng: random.Random) -> list[ToolCall]:
    """Wander blindly: random moves, takes, drops, key uses and crafts."""
    items = [item for item, _ in task.params["items"]] or ["cup"]
    keys = [item for item in items if item.endswith(" key")]
    calls = []
    for _ in range(rng.randint(3, 20)):
        kind = rng.choice(["move", "move", "take", "take", "drop", "use", "craft"])
        direction = rng.choice(list(rules.DIRECTIONS))
        if kind == "move":
            calls.append(ToolCall("move", {"to": direction}))
        elif kind in ("take", "drop"):
            calls.append(ToolCall(kind, {"item": rng.choice(items)}))
        elif kind == "use" and keys:
            calls.append(ToolCall("use", {"item": rng.choice(keys), "target": direction}))
        else:
            calls.append(ToolCall("craft", {"item": rng.choice(list(rules.RECIPES))}))
    return [*calls, finish()]


def test_random_explorations_relabel_to_tasks_the_verifier_passes():
    rng = random.Random(5)
    kinds: Counter[str] = Counter()
    tasks = env.tasks("train", 120)
    for task in tasks:
        calls = explore(task, rng)
        described = describe_task(env, replay(env, task, calls))
        if described is None:
            continue
        kinds[described.family] += 1
        assert replay(env, described, calls).passed
        assert replay(env, described, env.oracle(described)).passed
        assert 1 <= described.difficulty <= MAX_DIFFICULTY
    assert 0 < sum(kinds.values()) < len(tasks)
    assert len(kinds) >= 3, kinds


def test_arguments_accept_only_the_names_the_env_has_and_reveal_nothing_of_the_house():
    session = env.session(task_for({"kind": "go", "room": "green"}))
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in session.reset().tools}
    rooms = [f"{color} room" for color in rules.COLORS]
    assert schemas["move"]["properties"]["to"]["enum"] == ["north", "south", "east", "west", *rooms]
    assert schemas["take"]["properties"]["item"]["enum"] == list(rules.VOCABULARY)
    assert schemas["use"]["properties"]["item"]["enum"] == list(rules.KEYS)
    assert schemas["craft"]["properties"]["item"]["enum"] == list(rules.RECIPES)
    # Two houses of different contents offer the same schemas: nothing unseen is named.
    other = env.session(env.tasks("train", 1, seed=9, difficulty=5)[0]).reset().tools
    assert other == session.reset().tools
    for call in (
        ToolCall("take", {"item": "items you can make with the wood"}),
        ToolCall("move", {"to": "kitchen"}),
        ToolCall("craft", {"item": "sword"}),
    ):
        observation = session.step(call)
        assert observation.error and observation.error.startswith(f"bad arguments for {call.name}")
    missing = session.step(ToolCall("take", {"item": "lantern"}))  # a name, not in this house
    assert missing.error and "no lantern" in missing.error
    assert session.step(ToolCall("inventory", {})).text == "You hold nothing."


def test_every_house_offers_every_tool():
    world = {**WORLD, "doors": [["red", "blue", None], ["blue", "green", None]]}
    world["items"] = [["cup", "blue"]]
    world["goal"] = {"kind": "go", "room": "blue"}
    task = Task("grid-u", "grid", "Go.", "test", family="go", params=world)
    names = [t["function"]["name"] for t in env.session(task).reset().tools]
    assert names == ["move", "look", "take", "drop", "use", "craft", "inventory", "finish"]


def prefix_views(trajectory: Trajectory) -> list[list[ToolCall]]:
    """The episode cut after each successful action, finished with what that action showed."""
    views = []
    for end, step in enumerate(trajectory.steps, 1):
        if step.call is None or step.failed or step.call.name == "finish":
            continue
        calls = [s.call for s in trajectory.steps[:end] if s.call is not None]
        views.append([*calls, finish(step.observation.text)])
    return views


def test_a_failed_episode_is_relabelled_to_the_sub_goals_its_prefixes_reached():
    task = task_for({"kind": "bring", "item": "stone", "room": "red"})
    calls = [*CRAFT_AXE[1:4], ToolCall("move", {"to": "green room"}), ToolCall("look", {})]
    failed = replay(env, task, calls)
    assert not failed.passed
    described = [describe_task(env, replay(env, task, view)) for view in prefix_views(failed)]
    goals = [d.params["goal"] if d else None for d in described]
    assert goals == [
        {"kind": "fetch", "item": "brass key"},
        {"kind": "unlock", "rooms": ["red", "blue"]},
        {"kind": "unlock", "rooms": ["red", "blue"]},
        {"kind": "unlock", "rooms": ["red", "blue"]},
        {"kind": "unlock", "rooms": ["red", "blue"]},
    ]
    assert [d.difficulty for d in described if d] == [1, 2, 2, 2, 2]
    for task_found, view in zip(described, prefix_views(failed), strict=True):
        assert task_found is not None and replay(env, task_found, view).passed


def test_an_episode_that_changed_nothing_is_not_relabelled():
    task = task_for({"kind": "go", "room": "green"})
    calls = [
        ToolCall("look", {}),
        ToolCall("move", {"to": "east"}),  # locked
        ToolCall("take", {"item": "cup"}),  # in another room
        ToolCall("inventory", {}),
    ]
    trajectory = replay(env, task, calls)
    assert not trajectory.passed
    assert all(
        describe_task(env, replay(env, task, view)) is None for view in prefix_views(trajectory)
    )
    assert describe_task(env, trajectory) is None
