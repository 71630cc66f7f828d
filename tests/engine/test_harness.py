import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.core.agent import Agent
from ratchet.core.memory import Exemplar, Insight
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import InfrastructureError
from ratchet.engine import harness
from ratchet.engine.harness import Budget, parse_action, replay, run_episode, system_message
from ratchet.engine.models.base import Completion
from ratchet.envs.calc import env


def call_text(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


TASK = env.tasks("test", 1, difficulty=1)[0]


def replies(texts, seen=None):
    """A policy that answers turn ``i`` with ``texts[i]`` (and records the prompts it saw)."""

    def policy(prompt, turn):
        if seen is not None:
            seen.append(prompt)
        if turn >= len(texts):
            return Completion("", error="no more replies")
        return Completion(texts[turn], completion_tokens=5)

    return policy


def play_texts(texts, budget=None, agent=None):
    return run_episode(env, TASK, agent or Agent(model="fake"), replies(texts), budget)


def test_oracle_replies_pass_and_are_recorded_in_chat_format():
    op, b = TASK.params["steps"][0]
    a, answer = TASK.params["start"], TASK.params["answer"]
    trajectory = play_texts([call_text(op, a=a, b=b), call_text("finish", answer=str(answer))])
    assert trajectory.passed and trajectory.terminated and not trajectory.truncated
    roles = [m["role"] for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert trajectory.messages[2]["tool_calls"][0]["function"]["name"] == op
    assert trajectory.messages[3]["tool_call_id"] == "call_0"
    assert trajectory.completion_tokens == 10


def test_malformed_output_and_unknown_tools_become_observations():
    texts = ["I think the answer is 5", call_text("sqrt", x=4), "{bad json"]
    trajectory = play_texts(texts, Budget(max_turns=3))
    assert [s.call is None for s in trajectory.steps] == [True, False, True]
    assert trajectory.errors == 3
    assert "no JSON object" in trajectory.steps[0].observation.text
    assert "unknown tool 'sqrt'" in trajectory.steps[1].observation.text
    assert trajectory.messages[3] == {
        "role": "user",
        "content": trajectory.steps[0].observation.text,
    }


def test_turn_and_token_budgets_truncate():
    spin = [call_text("add", a=1, b=1)] * 10
    by_turns = play_texts(spin, Budget(max_turns=3))
    assert by_turns.truncated and len(by_turns.steps) == 3 and not by_turns.passed
    by_tokens = play_texts(spin, Budget(max_turns=99, max_episode_tokens=12))
    assert by_tokens.truncated and len(by_tokens.steps) == 3
    assert by_tokens.verdict is not None  # a truncated episode is still verified


def test_time_queued_for_the_model_does_not_count_against_the_budget(monkeypatch):
    """The harness's clock moves only while the policy waits: a minute queued for a batch."""
    now = [0.0]
    monkeypatch.setattr(harness, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def slow_queue(prompt, turn):
        now[0] += 60.0  # waiting for a shared batch: not this episode's work
        return Completion(call_text("add", a=1, b=1), latency_s=0.001)

    trajectory = run_episode(env, TASK, Agent(model="fake"), slow_queue, Budget(5, 999, 0.04))
    assert len(trajectory.steps) == 5 and trajectory.seconds == pytest.approx(0.005)


def test_the_backend_s_own_time_counts_against_the_budget():
    def slow_model(prompt, turn):
        return Completion(call_text("add", a=1, b=1), latency_s=0.05)

    trajectory = run_episode(env, TASK, Agent(model="fake"), slow_model, Budget(5, 999, 0.04))
    assert len(trajectory.steps) == 1 and trajectory.truncated


def test_model_error_ends_the_episode_with_an_error():
    def failing(prompt, turn):
        return Completion("", error="HTTP 500 after 5 retries")

    trajectory = run_episode(env, TASK, Agent(model="fake"), failing)
    assert trajectory.error == "model error: HTTP 500 after 5 retries"
    assert trajectory.verdict is None and trajectory.score == 0.0


def test_broken_env_is_recorded_not_raised():
    class Broken:
        name, description, version, max_difficulty = "broken", "", "1", 1

        def session(self, task):
            raise OSError("disk on fire")

    trajectory = run_episode(Broken(), TASK, Agent(model="fake"), replies([]))  # type: ignore[arg-type]
    assert trajectory.error == "env failed to start: OSError('disk on fire')"
    assert trajectory.verdict is None


class _Raising:
    """A session whose first step raises ``error``."""

    def __init__(self, error):
        self.error = error

    def reset(self):
        from ratchet.core.trajectory import Observation

        return Observation("go")

    def step(self, call):
        raise self.error

    def verify(self):
        raise AssertionError("not reached")

    def close(self):
        pass


class _RaisingEnv:
    """An env whose sessions raise ``error`` at the first step, or at the start."""

    name, description, version, max_difficulty = "raising", "", "1", 1

    def __init__(self, error, at_start=False):
        self.error, self.at_start = error, at_start

    def session(self, task):
        if self.at_start:
            raise self.error
        return _Raising(self.error)


def test_a_session_that_raises_is_recorded_not_raised():
    env = _RaisingEnv(RuntimeError("step exploded"))
    trajectory = run_episode(env, TASK, Agent(model="fake"), replies([call_text("x")]))  # type: ignore[arg-type]
    assert trajectory.error == "episode failed: RuntimeError: step exploded"
    assert not trajectory.infrastructure_failed


def test_an_infrastructure_error_marks_the_episode_errored_not_failed():
    for at_start in (True, False):
        env = _RaisingEnv(InfrastructureError("the server is gone"), at_start)
        trajectory = run_episode(env, TASK, Agent(model="fake"), replies([call_text("x")]))  # type: ignore[arg-type]
        assert trajectory.error == "infrastructure error: the server is gone"
        assert trajectory.infrastructure_failed and trajectory.verdict is None


def test_prompt_has_insights_and_demonstrations_before_the_task():
    demo = Exemplar(
        "calc", "expression", 1, "Compute 1 + 2.", ({"role": "assistant", "content": "x"},)
    )
    agent = Agent(model="fake", insights=(Insight("Always call finish."),))
    seen = []
    run_episode(
        env, TASK, agent, replies([call_text("finish", answer="1")], seen), demonstrations=(demo,)
    )
    prompt = seen[0]
    assert "Always call finish." in prompt.messages[0]["content"]
    assert prompt.messages[1] == {"role": "user", "content": "Compute 1 + 2."}
    assert prompt.messages[3]["content"] == TASK.instruction
    assert {t["function"]["name"] for t in prompt.tools} >= {"add", "finish"}


def test_parse_action_accepts_fences_native_calls_and_string_arguments():
    fenced = parse_action(Completion('```json\n{"name": "add", "arguments": {"a": 1}}\n```'))
    assert fenced == ToolCall("add", {"a": 1})
    native = parse_action(Completion("", tool_calls=(ToolCall("add", {"a": 2}),)))
    assert native == ToolCall("add", {"a": 2})
    stringly = parse_action(Completion('{"name": "add", "arguments": "{\\"a\\": 3}"}'))
    assert stringly == ToolCall("add", {"a": 3})
    assert parse_action(Completion('{"name": "add", "arguments": [1]}')) == (
        '"arguments" must be a JSON object'
    )


def test_system_message_without_insights_is_the_prompt():
    assert system_message(Agent())["content"] == Agent().system_prompt


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(),
        json_values.map(json.dumps),
        st.builds(
            lambda name, args: json.dumps({"name": name, "arguments": args}),
            st.sampled_from(["add", "divide", "finish", "nope", ""]),
            json_values,
        ),
    )
)
def test_fuzzed_model_output_never_crashes_the_harness(text):
    trajectory = play_texts([text, text], Budget(max_turns=2))
    assert trajectory.error is None
    assert len(trajectory.steps) in (1, 2)


def test_replay_runs_calls_and_stops_at_the_end():
    op, b = TASK.params["steps"][0]
    calls = [ToolCall(op, {"a": TASK.params["start"], "b": b})]
    partial = replay(env, TASK, calls)
    assert len(partial.steps) == 1 and partial.truncated and not partial.passed
    assert replay(env, TASK, env.oracle(TASK)).passed
    assert replay(env, TASK, []).steps == ()
