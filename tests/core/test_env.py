from dataclasses import replace

import pytest

from ratchet.core.env import SimpleEnv, end_episode
from ratchet.core.serialise import from_dict, to_dict
from ratchet.core.task import Task, TaskSpec
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation
from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay

TASK = Task("t-1", "toy", "Shout hello.", "test", problem="hello")


def test_observation_round_trip():
    observation = Observation("x", done=True, terminated=True, error="e")
    assert from_dict(Observation, to_dict(observation)) == observation


def test_simple_env_builds_a_fresh_world_per_session():
    env = SimpleEnv(
        name="toy",
        description="toy",
        sample=lambda rng, d: None,  # type: ignore[arg-type, return-value]
        build=lambda task: [],
        tools=lambda world: [],
        verify=lambda task, world, answer: Verdict.of(world == []),
        oracle=lambda task: [],
    )
    assert env.session(TASK).verify().passed


def game(rng, difficulty):
    return TaskSpec("Find the exit.", {"exit": rng.randrange(3), "hall": rng.randrange(999)})


def game_tools(world):
    def open_door(door: int):
        """Open a door; the right one ends the game, a wrong one loses it.

        Args:
            door: Which door, 0 to 2.
        """
        world["opened"] = door
        won = door == world["exit"]
        return end_episode("You escaped!" if won else "A trap: game over.")

    return [open_door]


GAME = SimpleEnv(
    name="doors",
    description="pick a door",
    sample=game,
    build=lambda task: {"exit": task.params["exit"], "opened": None},
    tools=game_tools,
    verify=lambda task, world, answer: Verdict.of(world["opened"] == world["exit"]),
    oracle=lambda task: [ToolCall("open_door", {"door": task.params["exit"]})],
    observe=lambda world: "You stand in a hall with doors 0, 1 and 2.",
)


def test_first_observation_comes_from_the_world():
    session = GAME.session(GAME.tasks("train", 1)[0])
    assert session.reset().text == "Find the exit.\n\nYou stand in a hall with doors 0, 1 and 2."


def test_a_tool_can_end_the_episode_won_or_lost():
    task = GAME.tasks("test", 1)[0]
    won = replay(GAME, task, GAME.oracle(task))
    assert won.passed and won.terminated and won.steps[-1].observation.text == "You escaped!"
    wrong = (task.params["exit"] + 1) % 3
    lost = replay(GAME, task, [ToolCall("open_door", {"door": wrong}), ToolCall("finish", {})])
    assert not lost.passed and len(lost.steps) == 1  # the game was over: finish never ran
    session = GAME.session(task)
    session.reset()
    session.step(ToolCall("open_door", {"door": wrong}))
    assert session.step(ToolCall("open_door", {"door": 0})).error == (
        "the episode is over; no more calls are taken"
    )


def test_a_world_whose_first_observation_fails_is_torn_down():
    torn = []

    def observe(world):
        raise RuntimeError("no light in the hall")

    broken = replace(GAME, observe=observe, teardown=torn.append)
    with pytest.raises(RuntimeError, match="no light"):
        broken.session(broken.tasks("train", 1)[0])
    assert len(torn) == 1


def test_the_names_simple_env_took_before_the_rename_still_work_with_a_warning():
    def describe(trajectory):
        return None

    with pytest.warns(DeprecationWarning) as caught:
        env = SimpleEnv(
            name="toy",
            description="toy",
            sample=game,
            build=lambda task: [],
            tools=lambda world: [],
            check=lambda task, world, answer: Verdict.of(answer == "out"),
            solve=lambda task: [ToolCall("finish", {"answer": "out"})],
            relabel=describe,
        )
    assert [str(w.message).split(" is ")[0] for w in caught] == [
        "SimpleEnv(check=...)",
        "SimpleEnv(solve=...)",
        "SimpleEnv(relabel=...)",
    ]
    assert str(caught[0].message).endswith("use verify=...") and caught[0].filename == __file__
    assert env.describe is describe
    task = env.tasks("test", 1)[0]
    assert replay(env, task, env.oracle(task)).passed
    assert replace(env, name="toy2").oracle(task) == env.oracle(task)
    with pytest.raises(TypeError, match="needs verify= and oracle="):
        SimpleEnv(name="x", description="", sample=game, build=lambda t: [], tools=lambda w: [])
