import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("openenv")
pytest.importorskip("websockets")

from ratchet.core.agent import Agent
from ratchet.core.pool import TaskPool
from ratchet.core.task import SPLITS, TaskSpec
from ratchet.core.tool import ToolCall, ToolError
from ratchet.core.trajectory import InfrastructureError
from ratchet.engine.harness import replay
from ratchet.engine.metrics import summarize
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.calc import env as calc
from ratchet.envs.check import check_env
from ratchet.integrations.openenv import openenv_env
from ratchet.integrations.openenv_client import tool_result_text
from ratchet.integrations.openenv_server import openenv_app, server_name

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


def guess_server(example, slots):
    """The example's guessing game served again, holding ``slots`` sessions at once."""
    from openenv.core.env_server.http_server import create_app

    game = example.SERVER
    app = create_app(
        game.GuessEnvironment, game.GuessAction, game.GuessObservation,
        env_name="guess", max_concurrent_envs=slots,
    )  # fmt: skip
    return example.start(app)


ORACLE = Agent(version="oracle", model="scripted")


def test_a_server_with_fewer_slots_than_the_rollout_gives_the_oracle_full_marks(example):
    remote = openenv_env(guess_server(example, 2), name="guess-2", oracle=example.oracle)
    assert remote.max_sessions is None  # nothing said yet: the rollout runs 16 at once
    tasks = remote.tasks("test", 12)
    played = rollout(remote, tasks, ORACLE, None, RolloutConfig(concurrency=16), k=2)
    metrics = summarize(played, k=2)
    assert metrics.pass_at_1 == 1.0 and metrics.n == 12 and metrics.infrastructure_errors == 0
    assert remote.max_sessions == 2  # learned from the server's refusal, for later rollouts


def test_a_server_that_stays_full_errors_the_episodes_and_they_are_counted_apart(example):
    from openenv.core.generic_client import GenericEnvClient

    url = guess_server(example, 1)
    holder = GenericEnvClient(base_url=url).sync()  # another client keeps the only slot
    holder.reset(split="test", index=0)
    try:
        remote = openenv_env(url, name="guess-1", oracle=example.oracle, capacity_wait_s=0.5)
        with pytest.raises(InfrastructureError, match=r"no free session within 0\.5 s"):
            remote.session(remote.tasks("test", 1)[0])
        played = rollout(remote, remote.tasks("test", 3), ORACLE, None, RolloutConfig())
    finally:
        holder.close()
    assert all(t.infrastructure_failed for t in played)
    assert played[0].error.startswith("infrastructure error: OpenEnv server")
    metrics = summarize(played, k=1)
    assert (metrics.n, metrics.infrastructure_errors) == (0, 3)


def mcp_server(example):
    """A standard OpenEnv MCP environment (FastMCP tools) whose results are CallToolResults."""
    from fastmcp import FastMCP
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
    from openenv.core.env_server.types import Observation, State

    tools = FastMCP("echo")

    @tools.tool()
    def shout(text: str) -> str:
        """Shout a text back."""
        return text.upper()

    @tools.tool()
    def refuse(text: str) -> str:
        """Always fails."""
        raise ValueError(f"cannot take {text!r}")

    class Echo(MCPEnvironment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__(tools)
            self._state = State(step_count=0)

        def reset(self, seed=None, episode_id=None, **kwargs):
            return Observation(done=False, reward=None)

        def _step_impl(self, action, timeout_s=None, **kwargs):
            return Observation(done=False, reward=None)

        @property
        def state(self):
            return self._state

    app = create_app(Echo, CallToolAction, CallToolObservation, env_name="echo")
    return example.start(app)


def test_mcp_tool_results_reach_the_agent_as_their_text(example):
    pytest.importorskip("fastmcp")
    pool = TaskPool(test=[TaskSpec("Shout hi.", {"reset": {}})])
    remote = openenv_env(mcp_server(example), name="echo", oracle=lambda task: [], sample=pool)
    session = remote.session(remote.tasks("test", 1)[0])
    try:
        offered = [t["function"]["name"] for t in session.reset().tools]
        assert offered == ["shout", "refuse", "finish"]
        assert session.step(ToolCall("shout", {"text": "hi"})).text == "HI"
        refused = session.step(ToolCall("refuse", {"text": "hi"}))
        assert refused.error is not None and "cannot take 'hi'" in refused.error
    finally:
        session.close()


def test_the_text_of_an_mcp_result_in_either_spelling():
    result = {"content": [{"type": "text", "text": "one"}, {"type": "image", "data": "..."},
                          {"type": "text", "text": "two"}], "is_error": False}  # fmt: skip
    assert tool_result_text(result) == "one\n[image content]\ntwo"
    with pytest.raises(ToolError, match="no such row"):
        tool_result_text({"content": [{"type": "text", "text": "no such row"}], "isError": True})
    assert tool_result_text(8) == "8" and tool_result_text({"a": 1}) == '{"a": 1}'
