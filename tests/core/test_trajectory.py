from ratchet.core.agent import Agent
from ratchet.core.serialise import from_json, to_json
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import replay
from ratchet.envs.calc import env


def test_play_records_messages_steps_and_verdict():
    task = env.tasks("test", 2, seed=1)[1]
    trajectory = replay(env, task, env.oracle(task), Agent(version="oracle"))
    assert trajectory.passed and trajectory.score == 1.0 and trajectory.terminated
    assert trajectory.agent == "oracle"
    assert trajectory.messages[0]["role"] == "system"
    assert trajectory.messages[1] == {"role": "user", "content": task.instruction}
    assert trajectory.messages[2]["tool_calls"][0]["id"] == "call_0"
    assert trajectory.messages[3]["role"] == "tool"
    assert len(trajectory.steps) == len(env.oracle(task))
    assert trajectory.errors == 0


def test_play_stops_at_finish_and_counts_errors():
    task = env.tasks("test", 1)[0]
    calls = [ToolCall("divide", {"a": 1, "b": 0}), ToolCall("finish", {"answer": "x"})]
    trajectory = replay(env, task, [*calls, ToolCall("add", {"a": 1, "b": 2})])
    assert len(trajectory.steps) == 2
    assert trajectory.errors == 1
    assert not trajectory.passed


def test_json_round_trip():
    task = env.tasks("train", 1)[0]
    trajectory = replay(env, task, env.oracle(task))
    assert from_json(Trajectory, to_json(trajectory)) == trajectory
