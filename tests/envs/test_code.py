import functools
import json
import random

import pytest

from fakes import describe_task
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs.check import check_env
from ratchet.envs.code import canon, env, expected, family_cases, hidden_cases, level_of
from ratchet.envs.code.families import BY_NAME, FAMILIES
from ratchet.sandbox import landlock_abi

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")


def _write(code):
    return ToolCall("write_solution", {"code": code})


FINISH = ToolCall("finish", {"answer": "done"})


@functools.cache
def _tasks():
    return env.tasks("test", 300)


def _task(family="rotate"):
    return next(t for t in _tasks() if t.params["family"] == family)


def test_thousands_of_distinct_tasks_and_every_kind():
    tasks = env.tasks("train", 2000)
    assert len({t.instruction for t in tasks}) == 2000
    assert {t.family for t in tasks} == {f.kind for f in FAMILIES}


def test_thousands_of_distinct_problems_at_every_level():
    """A problem is a family and its parameters: the function name and the examples are not."""
    for level in range(1, 6):
        pool = [f for f in FAMILIES if level_of(f) <= level and (level > 1) == (level_of(f) > 1)]
        assert sum(len(f.grid) for f in pool) >= 1500, level


def test_level_one_spells_out_the_expression_to_return():
    for task in env.tasks("test", 20, difficulty=1):
        assert task.family == "expression"
        body = env.oracle(task)[0].arguments["code"].splitlines()[1].strip()
        assert body.startswith("return ") and f"returns `{body[7:]}`" in task.instruction


def test_levels_add_one_kind_at_a_time():
    kinds = {
        level: {t.family for t in env.tasks("train", 200, difficulty=level)} for level in (2, 3, 5)
    }
    assert kinds[2] == {"string", "list"}
    assert kinds[3] == {"string", "list", "dict"}
    assert kinds[5] == {"string", "list", "dict", "number", "algorithm"}


def test_every_family_reference_passes_its_hidden_tests():
    for family in FAMILIES:
        task = _task(family.name)
        assert replay(env, task, env.oracle(task)).passed, family.name


def test_a_wrong_solution_scores_partially_and_fails():
    task = _task("rotate")
    fn = task.params["fn"]
    trajectory = replay(env, task, [_write(f"def {fn}(items):\n    return items\n"), FINISH])
    assert not trajectory.passed
    assert trajectory.score < 1.0
    assert "hidden tests passed" in trajectory.verdict.feedback


def test_run_tests_reports_each_example_deterministically():
    task = _task("caesar")
    fn = task.params["fn"]
    session = env.session(task)
    try:
        session.reset()
        assert session.step(ToolCall("run_tests", {})).error
        session.step(_write(f"def {fn}(text):\n    print('debug')\n    return text\n"))
        text = session.step(ToolCall("run_tests", {})).text
    finally:
        session.close()
    assert text.count("FAIL") + text.count("PASS") == 3
    assert "[program output]" in text and "debug" in text
    assert "/tmp" not in text


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("while True: pass", marks=pytest.mark.slow),
        "import os\nwhile True: os.fork()",
        "return open('/etc/passwd').read()",
        "import socket\nreturn socket.create_connection(('1.1.1.1', 80))",
        "return bytearray(4 * 1024 ** 3)",
    ],
)
def test_escape_attempts_fail_the_task_and_leave_the_session_going(body):
    task = _task("long_words")
    fn = task.params["fn"]
    code = f"def {fn}(text):\n" + "\n".join("    " + line for line in body.splitlines())
    session = env.session(task)
    try:
        session.reset()
        session.step(_write(code))
        observation = session.step(ToolCall("run_tests", {}))
        assert observation.error or "ERROR" in observation.text
        assert session.step(ToolCall("read_solution", {})).text == code
        assert not session.verify().passed
    finally:
        session.close()


def test_forged_result_lines_and_the_reference_module_do_not_help():
    task = _task("digit_sum")
    fn = task.params["fn"]
    forged = (
        "print('@@ratchet-results@@' + '[]')\n"
        "from ratchet.envs.code import families\n"
        f"def {fn}(n):\n    return 0\n"
    )
    assert replay(env, task, [_write(forged), FINISH]).score == 0.0


def test_syntax_errors_are_reported_when_writing():
    task = _task()
    session = env.session(task)
    try:
        session.reset()
        assert "syntax error" in session.step(_write("def broken(:\n")).text
        assert not session.verify().passed
    finally:
        session.close()


def test_describe_names_the_family_of_the_written_function():
    task = _task("chunk")
    described = describe_task(env, replay(env, task, env.oracle(task)))
    assert described is not None
    assert described.params["family"] == "chunk"
    assert described.params["params"] == task.params["params"]


def test_describe_relabels_an_exploration_that_solved_another_task():
    task = _task("rotate")
    other = BY_NAME["top_k"]
    code = other.reference("top_k", {"k": 2, "small": False})
    trajectory = replay(env, task, [_write(code), FINISH])
    assert not trajectory.passed
    described = describe_task(env, trajectory)
    assert described is not None
    assert described.params["family"] == "top_k"
    assert described.params["params"] == {"k": 2, "small": False}
    assert described.difficulty == 2
    assert replay(env, described, [_write(code), FINISH]).passed


def test_a_failed_episode_is_relabelled_by_the_prefix_that_wrote_a_working_function():
    task = _task("caesar")
    fn = task.params["fn"]
    wrong = f"def {fn}(text):\n    return text.upper()\n"
    other = f"def {fn}(text):\n    return text.replace('a', 'b')\n"
    calls = [_write(other), ToolCall("run_tests", {}), _write(wrong)]
    failed = replay(env, task, calls)
    assert not failed.passed
    view = [*calls[:2], ToolCall("finish", {"answer": failed.steps[1].observation.text})]
    described = describe_task(env, replay(env, task, view))
    assert described is not None and described.family == "string"
    assert described.params["params"] == {"old": "a", "new": "b"}
    assert replay(env, described, view).passed
    assert describe_task(env, replay(env, task, [*calls, FINISH])) is None  # upper() is no family


def test_describe_names_nothing_without_a_working_function():
    task = _task()
    assert describe_task(env, replay(env, task, [FINISH])) is None
    trajectory = replay(env, task, [_write("def unrelated():\n    return 1\n"), FINISH])
    assert describe_task(env, trajectory) is None


def test_conformance_on_a_few_tasks():
    report = check_env(env, n=10, split_draws=100)
    assert report.passed, report.results


@pytest.mark.slow
def test_conformance_on_200_tasks():
    report = check_env(env, n=200)
    assert report.passed, report.results


def _plant_link(session, target):
    plant = f"import os\nos.remove('solution.py')\nos.symlink({str(target)!r}, 'solution.py')\n"
    session.step(_write(plant))
    session.step(ToolCall("run_tests", {}))


def test_read_and_write_solution_do_not_follow_links_planted_by_agent_code(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    session = env.session(_task())
    try:
        session.reset()
        _plant_link(session, secret)
        read = session.step(ToolCall("read_solution", {}))
        assert "TOP-SECRET-VALUE" not in read.text
        assert read.error and "link" in read.error
        session.step(_write("OVERWRITTEN"))
        assert not session.verify().passed
    finally:
        session.close()
    assert secret.read_text() == "TOP-SECRET-VALUE"


def test_a_planted_link_is_replaced_by_the_next_write(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    task = _task()
    session = env.session(task)
    try:
        session.reset()
        _plant_link(session, secret)
        session.step(_write(BY_NAME["rotate"].reference(task.params["fn"], task.params["params"])))
        assert session.verify().passed
    finally:
        session.close()
    assert secret.read_text() == "TOP-SECRET-VALUE"


TRIVIAL = [
    *((f"return {value!r}", lambda *args, v=value: v) for value in
      (False, True, 0, 1, -1, "", [], {}, None)),
    ("return the argument", lambda *args: args[0]),
    ("return not the argument", lambda *args: not args[0]),
    ("return its length", lambda *args: len(args[0]) if hasattr(args[0], "__len__") else 0),
    ("return its length is even", lambda *args: len(args[0]) % 2 == 0
     if hasattr(args[0], "__len__") else False),
]  # fmt: skip


def _outputs(fn, cases):
    results = []
    for args in cases:
        try:
            results.append(canon(fn(*json.loads(json.dumps(args)))))
        except Exception:
            results.append(None)
    return results


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_no_constant_or_trivial_function_passes_the_hidden_tests(family):
    rng = random.Random(family.name)
    for seed in range(40):
        params = rng.choice(family.grid)
        cases = hidden_cases(family, params, seed)
        want = expected(family, params, cases)
        for name, fn in TRIVIAL:
            assert _outputs(fn, cases) != want, (family.name, params, seed, name)


def test_return_false_no_longer_passes_a_balanced_task():
    def constant_false_passed_before(task):
        family = BY_NAME["balanced"]
        old = family_cases(family, task.params["test_seed"] + 1, 12)
        return all(v == ["bool", False] for v in expected(family, task.params["params"], old))

    drawn = (t for seed in range(20) for t in env.tasks("test", 100, seed=seed))
    task = next(t for t in drawn if t.params["family"] == "balanced" and
                constant_false_passed_before(t))  # fmt: skip
    code = f"def {task.params['fn']}(text):\n    return False\n"
    assert not replay(env, task, [_write(code), FINISH]).passed
