import random

from fakes import describe_task
from ratchet.core.task import Task, make_task
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs.calc import env, relabel

TASK = Task("calc-t", "calc", "Compute 1 + 1.", "train", "expression", 1, 0, {"answer": 2})


def run(calls: list[ToolCall]):
    return replay(env, TASK, calls)


def op(name: str, a: float, b: float) -> ToolCall:
    return ToolCall(name, {"a": a, "b": b})


def finish(answer: object) -> ToolCall:
    return ToolCall("finish", {"answer": str(answer)})


def test_oracle_trajectories_relabel_to_their_own_expression():
    for task in env.tasks("test", 40):
        spec = describe_task(env, replay(env, task, env.oracle(task)))
        assert spec is not None
        assert spec.params == task.params
        assert spec.family in ("expression", "word")
        assert spec.difficulty == task.difficulty
        described = make_task("calc", spec, difficulty=1)
        assert described.problem == task.problem and described.split == task.split
        assert replay(env, described, env.oracle(described)).passed


def test_the_chain_and_its_text():
    trajectory = run([op("add", 3, 4), op("multiply", 7, 2), finish(14)])
    spec = relabel(trajectory)
    assert spec is not None
    assert spec.instruction == "Compute (3 + 4) * 2." or " has 3 " in spec.instruction
    assert spec.params == {"start": 3, "steps": [["add", 4], ["multiply", 2]], "answer": 14}
    assert spec.difficulty == 2


def test_previous_result_as_second_operand_only_for_commutative_ops():
    spec = relabel(run([op("add", 3, 4), op("multiply", 2, 7), finish(14)]))
    assert spec is not None and spec.params["steps"] == [["add", 4], ["multiply", 2]]
    # 20 - 7 does not continue "3 + 4": a second computation, so no clean task is named.
    assert relabel(run([op("add", 3, 4), op("subtract", 20, 7), finish(13)])) is None


def test_an_unrelated_call_spoils_the_chain_but_errors_are_skipped():
    calls = [op("multiply", 5, 6), op("divide", 30, 0), op("subtract", 30, 10)]
    spec = relabel(run([*calls, finish(20)]))
    assert spec is not None and spec.params["start"] == 5
    assert spec.params["steps"] == [["multiply", 6], ["subtract", 10]]
    assert relabel(run([op("add", 1, 2), *calls, finish(20)])) is None


def test_nothing_is_named_unless_the_answer_is_the_chain_value():
    assert relabel(run([op("add", 3, 4), finish(8)])) is None
    assert relabel(run([op("add", 3, 4), finish("seven")])) is None
    assert relabel(run([op("add", 3, 4)])) is None
    assert relabel(run([finish(7)])) is None
    assert describe_task(env, run([op("add", 3, 4), finish(8)])) is None


def test_fractions_break_the_chain():
    assert relabel(run([op("divide", 7, 2), op("multiply", 3.5, 2), finish(7)])) is None
    assert relabel(run([op("divide", 7, 2), op("add", 1, 1), finish(2)])) is None


def test_chains_longer_than_the_hardest_task_are_not_named():
    calls, value = [], 2
    for _ in range(5):
        calls.append(op("add", value, 1))
        value += 1
    spec = relabel(run([*calls, finish(value)]))
    assert spec is not None and spec.difficulty == 5 and spec.params["answer"] == 7
    assert relabel(run([*calls, op("add", value, 1), finish(value + 1)])) is None


def random_policy(task: Task, rng: random.Random) -> list[ToolCall]:
    """Explore: random operations, often on the last result, then finish with a guess."""
    numbers = [task.params["start"], *(n for _, n in task.params["steps"]), *range(1, 10)]
    calls, last = [], None
    for _ in range(rng.randint(1, 5)):
        name = rng.choice(["add", "subtract", "multiply", "divide"])
        a = last if last is not None and rng.random() < 0.7 else rng.choice(numbers)
        b = rng.choice(numbers)
        if rng.random() < 0.2:
            a, b = b, a
        calls.append(op(name, a, b))
        if name == "add":
            last = a + b
        elif name == "subtract":
            last = a - b
        elif name == "multiply":
            last = a * b
        elif b != 0:
            last = a / b
    guess = last if last is not None and rng.random() < 0.7 else rng.choice(numbers)
    return [*calls, finish(guess)]


def test_random_explorations_relabel_to_tasks_the_verifier_passes():
    rng = random.Random(7)
    relabelled = 0
    tasks = env.tasks("train", 150)
    for task in tasks:
        calls = random_policy(task, rng)
        described = describe_task(env, replay(env, task, calls))
        if described is None:
            continue
        relabelled += 1
        assert replay(env, described, calls).passed
        assert replay(env, described, env.oracle(described)).passed
        assert 1 <= described.difficulty <= env.max_difficulty
    assert 0 < relabelled < len(tasks)
