import pytest

from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs.calc import env


def test_difficulty_is_the_number_of_operations():
    for level in range(1, 6):
        for task in env.tasks("train", 20, difficulty=level):
            assert len(task.params["steps"]) == level


def test_thousands_of_distinct_tasks_per_split():
    tasks = env.tasks("test", 2000)
    assert len({t.instruction for t in tasks}) == 2000


def test_both_families_are_drawn():
    assert {t.family for t in env.tasks("train", 50)} == {"expression", "word"}


def test_division_by_zero_is_an_error_observation():
    session = env.session(env.tasks("test", 1)[0])
    session.reset()
    observation = session.step(ToolCall("divide", {"a": 4, "b": 0}))
    assert observation.error == "division by zero: b must not be 0"
    assert session.step(ToolCall("add", {"a": "four", "b": 1})).error


@pytest.mark.parametrize(
    ("answer", "passed"), [("{v}", True), ("{v}.0", True), (" {v} ", True), ("{w}", False)]
)
def test_answer_is_checked_exactly(answer, passed):
    task = env.tasks("test", 1, difficulty=2)[0]
    value = task.params["answer"]
    submitted = answer.format(v=value, w=value + 1)
    trajectory = replay(env, task, [ToolCall("finish", {"answer": submitted})])
    assert trajectory.passed is passed


def test_non_numeric_answer_explains_itself():
    task = env.tasks("test", 1)[0]
    trajectory = replay(env, task, [ToolCall("finish", {"answer": "I solved it"})])
    assert trajectory.verdict is not None
    assert "is not a number" in trajectory.verdict.feedback


@pytest.mark.parametrize("answer", ["nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-nan"])
def test_non_finite_answers_never_pass(answer):
    for task in env.tasks("test", 10, seed=3):
        trajectory = replay(env, task, [ToolCall("finish", {"answer": answer})])
        assert not trajectory.passed, (answer, task.id)
        assert "finite" in trajectory.verdict.feedback


def test_negative_zero_is_zero():
    drawn = (t for seed in range(50) for t in env.tasks("train", 200, seed=seed))
    task = next(t for t in drawn if t.params["answer"] == 0)
    assert replay(env, task, [ToolCall("finish", {"answer": "-0"})]).passed
