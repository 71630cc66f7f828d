import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("openenv")
pytest.importorskip("websockets")

from ratchet.adapters.openenv import openenv_env
from ratchet.adapters.openenv_server import openenv_app, server_name
from ratchet.core.task import SPLITS
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs.calc import env as calc
from ratchet.envs.check import check_env

EXAMPLE = Path(__file__).parents[2] / "examples" / "openenv_env.py"


@pytest.fixture(scope="module")
def example():
    """The example module: importing it starts the tiny guessing-game server."""
    spec = importlib.util.spec_from_file_location("openenv_example_under_test", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_openenv_server_s_task_api_and_action_schema_make_the_env(example):
    env = example.env
    assert [len(env.tasks(s, n)) for s, n in (("train", 30), ("probe", 12), ("test", 12))] == [
        30,
        12,
        12,
    ]
    task = env.tasks("test", 1)[0]
    assert task.params["reset"]["split"] == "test" and "Guess my secret number" in task.instruction
    first = env.session(task).reset()
    step = next(t["function"] for t in first.tools if t["function"]["name"] == "step")
    assert step["parameters"]["properties"]["guess"]["maximum"] == 100
    assert "metadata" not in step["parameters"]["properties"]
    assert first.text.endswith("I picked a number from 1 to 100.")


def test_the_server_s_reward_and_episode_end_decide_the_verdict(example):
    env = example.env
    task = env.tasks("test", 1)[0]
    secret = example.SERVER.SECRETS["test"][task.params["reset"]["index"]]
    wrong = 1 if secret != 1 else 2
    hint = replay(
        env, task, [ToolCall("step", {"guess": wrong}), ToolCall("finish", {"answer": ""})]
    )
    assert hint.steps[0].observation.text == "Higher." and not hint.passed
    bad = replay(env, task, [ToolCall("step", {"guess": 500}), ToolCall("finish", {"answer": ""})])
    assert "guess" in bad.steps[0].observation.error
    won = replay(env, task, env.oracle(task))
    assert won.passed and won.terminated and len(won.steps) == 1


def test_the_example_env_passes_check(example):
    report = check_env(example.env, n=4, split_draws=20)
    assert report.passed, [r for r in report.results if not r.passed]


def test_a_ratchet_env_served_as_openenv_round_trips(example):
    url = example.start(openenv_app(calc, tasks_per_split=20, api_key="k3y"))
    # The server keeps each task's params; the env's author looks them up by task id.
    ours = {task.id: task for split in SPLITS for task in calc.tasks(split, 20)}
    remote = openenv_env(
        url,
        name="calc-over-openenv",
        oracle=lambda task: calc.oracle(ours[task.params["task"]["id"]]),
        api_key="k3y",
    )
    assert server_name(calc) == "calc" and len(remote.tasks("probe", 20)) == 20
    task = remote.tasks("test", 1)[0]
    tools = [t["function"]["name"] for t in remote.session(task).reset().tools]
    assert tools == ["add", "subtract", "multiply", "divide", "finish"]
    report = check_env(remote, n=4, split_draws=20)
    assert report.passed, [r for r in report.results if not r.passed]
    with pytest.raises(ConnectionError, match="401"):
        openenv_env(url, name="no-key", oracle=lambda task: [])


def test_an_unreachable_server_is_a_clear_error():
    with pytest.raises(ConnectionError, match=r"OpenEnv server http://127\.0\.0\.1:9"):
        openenv_env("http://127.0.0.1:9", name="x", oracle=lambda task: [], timeout_s=2)
