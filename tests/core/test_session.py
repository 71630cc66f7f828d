import pytest

from ratchet.core.session import ToolSession
from ratchet.core.task import Task
from ratchet.core.tool import Tool, ToolCall, ToolError
from ratchet.core.verdict import Verdict


def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: What to shout.
    """
    if text == "boom":
        raise RuntimeError("kaboom")
    if text == "nope":
        raise ToolError("cannot shout nope")
    return text.upper()


TASK = Task("t-1", "toy", "Shout hello.", "test", problem="hello")


def make_session(closed: list[bool] | None = None) -> ToolSession:
    return ToolSession(
        TASK,
        [Tool.from_function(shout)],
        lambda answer: Verdict.of(answer == "HELLO"),
        policy="Be loud.",
        close=(lambda: closed.append(True)) if closed is not None else None,
    )


def test_reset_shows_task_policy_and_tools():
    first = make_session().reset()
    assert first.text == "Shout hello.\n\nPolicy:\nBe loud."
    assert [t["function"]["name"] for t in first.tools] == ["shout", "finish"]


def test_tool_results_and_finish():
    session = make_session()
    session.reset()
    assert session.step(ToolCall("shout", {"text": "hello"})).text == "HELLO"
    final = session.step(ToolCall("finish", {"answer": "HELLO"}))
    assert final.done and final.terminated and not final.truncated
    assert session.verify().passed
    after = session.step(ToolCall("shout", {"text": "again"}))
    assert after.error and after.done


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (ToolCall("whisper", {}), "unknown tool 'whisper'; available tools: shout, finish"),
        (ToolCall("shout", {}), "bad arguments for shout: text: required field is missing"),
        (ToolCall("shout", {"text": "boom"}), "shout failed: RuntimeError: kaboom"),
        (ToolCall("shout", {"text": "nope"}), "cannot shout nope"),
    ],
)
def test_bad_actions_become_error_observations(call, message):
    session = make_session()
    session.reset()
    observation = session.step(call)
    assert observation.error == message
    assert observation.text == f"Error: {message}"
    assert not observation.done


def test_no_answer_verifies_as_none_and_close_runs_once():
    closed: list[bool] = []
    session = make_session(closed)
    assert not session.verify().passed
    session.close()
    session.close()
    assert closed == [True]
