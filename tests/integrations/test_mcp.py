import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall, ToolError
from ratchet.engine.harness import replay
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.check import check_env
from ratchet.envs.registry import load_env_reference
from ratchet.integrations.mcp import HttpServer, MCPClient, StdioServer, mcp_env, mcp_tools

EXAMPLES = Path(__file__).parents[2] / "examples"
SERVER_FILE = EXAMPLES / "servers" / "stockroom_mcp.py"


@pytest.fixture(scope="module")
def example():
    return load_env_reference(f"{EXAMPLES / 'mcp_env.py'}:env")


@pytest.fixture(scope="module")
def http_url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER_FILE), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            with socket.socket() as attempt:
                if attempt.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def test_a_stdio_server_s_tools_become_ratchet_tools_with_its_schemas():
    client = MCPClient(StdioServer(sys.executable, [str(SERVER_FILE)]))
    try:
        tools = {tool.name: tool for tool in mcp_tools(client, hidden={"reset"})}
        assert set(tools) == {"stock", "add", "remove"}
        schema = tools["add"].parameters
        assert schema["properties"]["amount"]["type"] == "integer"
        assert schema["required"] == ["item", "amount"]
        assert tools["add"]({"item": "figs", "amount": 2}) == "figs: 2"
        with pytest.raises(ToolError, match="cannot remove 5 figs: there are 2"):
            tools["remove"]({"item": "figs", "amount": 5})
        with pytest.raises(ToolError, match="amount"):
            tools["add"].validate({"item": "figs", "amount": "many"})
        assert json.loads(client.call("stock")) == {"figs": 2}
    finally:
        client.close()


def test_the_example_env_passes_check_and_hides_setup_tools(example):
    report = check_env(example, n=4, split_draws=20)
    assert report.passed, [r for r in report.results if not r.passed]
    task = example.tasks("train", 1)[0]
    trajectory = replay(example, task, [ToolCall("reset", {"items": {}}), ToolCall("finish", {})])
    assert "unknown tool 'reset'" in trajectory.steps[0].observation.text


def test_server_errors_are_observations_the_agent_can_read(example):
    task = example.tasks("test", 1)[0]
    item = next(iter(task.params["start"]))
    calls = [ToolCall("remove", {"item": item, "amount": 99}), ToolCall("finish", {})]
    trajectory = replay(example, task, calls)
    assert f"cannot remove 99 {item}" in trajectory.steps[0].observation.error


def test_an_http_server_gives_each_concurrent_episode_its_own_world(http_url, example):
    env = mcp_env(
        HttpServer(http_url),
        name="stockroom-http",
        description="the stock room over streamable HTTP",
        sample=example.sample,
        verify=example.verify,
        oracle=example.oracle,
        setup=lambda task, client: client.call("reset", {"items": task.params["start"]}),
        hidden={"reset"},
        max_difficulty=3,
    )
    tasks = env.tasks("test", 3)
    plans = {task.instruction: env.oracle(task) for task in tasks}

    def reply(prompt, rng):
        done = sum(m["role"] == "tool" for m in prompt.messages)
        call = plans[prompt.messages[1]["content"]][done]
        return json.dumps({"name": call.name, "arguments": call.arguments})

    episodes = rollout(env, tasks, Agent(model="fake"), FakeModel(reply=reply), RolloutConfig(3))
    assert all(t.passed for t in episodes), [t.verdict for t in episodes]


def test_bad_servers_and_settings_are_clear_errors(example):
    with pytest.raises(ConnectionError, match="MCP server no-such-program-xyz failed to start"):
        MCPClient(StdioServer("no-such-program-xyz"), timeout_s=10)
    with pytest.raises(ValueError, match="reuse=True needs a setup"):
        mcp_env("http://127.0.0.1:9/mcp", name="x", description="x", sample=example.sample,
                verify=example.verify, oracle=example.oracle, reuse=True)  # fmt: skip
