from ratchet.agent import Agent
from ratchet.envs.calc import env
from ratchet.hindsight import relabel
from ratchet.tool import ToolCall
from ratchet.trajectory import play

TASK = env.tasks("train", 1, difficulty=3)[0]
AGENT = Agent(model="fake")


def calls(*specs):
    return [ToolCall(name, arguments) for name, arguments in specs]


def test_an_unfinished_exploration_becomes_a_minimal_verified_success():
    wandering = play(
        env,
        TASK,
        calls(
            ("add", {"a": 2, "b": 33}), ("add", {"a": 2, "b": 33}), ("multiply", {"a": 35, "b": 2})
        ),
    )
    assert not wandering.passed and not wandering.terminated
    found = relabel(env, wandering, AGENT)
    assert [len(r.task.params["steps"]) for r in found] == [2, 1]  # the whole chain, then 2 + 33
    relabelled = found[0]
    assert relabelled.passed
    assert relabelled.task.params == {
        "start": 2,
        "steps": [["add", 33], ["multiply", 2]],
        "answer": 70,
    }
    assert relabelled.task.split == "train"
    assert [s.call.name for s in relabelled.steps if s.call] == ["add", "multiply", "finish"]
    assert relabelled.messages[0]["role"] == "system"
    assert relabelled.metadata == {"hindsight": True, "source_task": TASK.id}


def test_a_wrong_submission_is_not_relabelled_and_successes_are_left_alone():
    wrong = play(env, TASK, calls(("add", {"a": 1, "b": 2}), ("finish", {"answer": "7"})))
    assert wrong.terminated and relabel(env, wrong, AGENT) == []
    solved = play(env, TASK, env.oracle(TASK))
    assert relabel(env, solved, AGENT) == []


def test_nothing_done_gives_nothing():
    assert relabel(env, play(env, TASK, []), AGENT) == []
