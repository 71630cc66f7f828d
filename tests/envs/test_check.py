import random
from dataclasses import replace

import pytest

from ratchet.core.env import SimpleEnv
from ratchet.core.pool import TaskPool
from ratchet.core.task import TaskSpec, make_task
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay
from ratchet.envs.calc import env as calc
from ratchet.envs.check import check_env, check_splits
from ratchet.envs.registry import make_env


def failing(report):
    return {r.name for r in report.results if not r.passed}


def test_calc_passes_every_check():
    report = check_env(calc, n=50, split_draws=200)
    assert report.passed, report.results
    assert len(report.results) == 16
    assert sum(r.name.startswith("red-team") for r in report.results) == 8


def test_the_report_names_the_optional_members_an_env_leaves_out_without_failing():
    report = check_env(calc, n=10, split_draws=50)
    assert report.passed
    assert report.left_out == (
        "policy",
        "split_of_params",
        "thread_safe",
        "max_sessions",
        "accepted_findings",
        "attacks",
    )
    lines = report.text().splitlines()
    assert lines[-2] == (
        "note  optional members left out (their defaults apply): "
        "policy, split_of_params, thread_safe, max_sessions, accepted_findings, attacks"
    )
    assert lines[-1] == f"calc passes all {len(report.results)} checks"
    given = replace(calc, policy="Answer in digits.", thread_safe=False, max_sessions=4)
    assert check_env(given, n=10, split_draws=50).left_out == (
        "split_of_params",
        "accepted_findings",
        "attacks",
    )


def test_a_verifier_that_trusts_claims_is_caught():
    gullible = replace(calc, verify=lambda task, world, answer: Verdict.of(bool(answer)))
    report = check_env(gullible, n=10, split_draws=50)
    caught = failing(report)
    assert "forged claim scores below the oracle" in caught
    lines = report.text().splitlines()
    assert any(line.startswith("FAIL  forged claim scores below the oracle: ") for line in lines)
    assert lines[-1] == f"calc fails {len(caught)} of {len(report.results)} checks"
    assert "red-team: prompt injection" in caught
    assert not caught & {"oracle scores 1", "determinism", "splits disjoint by problem"}


def test_a_wrong_oracle_is_caught():
    wrong = replace(calc, oracle=lambda task: [ToolCall("finish", {"answer": "-1"})])
    assert "oracle scores 1" in failing(check_env(wrong, n=10, split_draws=50))


def test_nondeterministic_episodes_are_caught():
    counter = iter(range(10**6))

    def leaky_tools(world):
        def tick() -> int:
            """Return a counter that never resets."""
            return next(counter)

        return [tick]

    def solve(task):
        return [ToolCall("tick", {}), *calc.oracle(task)[-1:]]

    leaky = replace(calc, tools=leaky_tools, oracle=solve)
    assert failing(check_env(leaky, n=10, split_draws=50)) == {"determinism"}


def test_a_crashing_env_is_reported_not_raised():
    def explode(task):
        raise RuntimeError("no world today")

    report = check_env(replace(calc, build=explode), n=5, split_draws=50)
    assert not report.passed
    assert any("no world today" in r.detail for r in report.results)


class WordingLeaksSplits:
    """calc with the old bug: a task's split hashed from its wording, not its problem."""

    def __init__(self):
        self.name, self.description, self.version = "leaky", "calc, split by wording", "1"
        self.max_difficulty = 1

    def tasks(self, split, n, seed=0, difficulty=None):
        rng, found = random.Random(seed), []
        while len(found) < n:
            spec = calc.sample(rng, 1)
            wording = spec.instruction
            worded = make_task("leaky", spec, difficulty=1, problem_key=lambda p, w=wording: w)
            if worded.split == split:
                found.append(worded)
        return found

    def session(self, task):
        return calc.session(task)

    def oracle(self, task):
        return calc.oracle(task)


def test_an_env_that_splits_by_wording_fails_the_split_check():
    report = check_env(WordingLeaksSplits(), n=5, split_draws=2000)
    failed = {r.name: r.detail for r in report.results if not r.passed}
    assert list(failed) == ["splits disjoint by problem"]
    assert "is in both" in failed["splits disjoint by problem"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["calc", "shop", "files", "code", "grid"])
def test_every_built_in_env_has_disjoint_splits_by_problem_at_2000_draws(name):
    print(check_splits(make_env(name), draws=2000, seed=0))


def test_instructions_shared_by_two_splits_are_flagged_and_same_solutions_fail():
    # The same words in two splits: with different solutions (the hidden world decides) they are
    # counted; with the same solution, spelled out in the words, they give nothing away.
    def worlds(rng, difficulty):
        world = rng.randrange(50)
        return TaskSpec("Say the number of this world.", {"world": world})

    hidden = SimpleEnv(
        name="hidden",
        description="one instruction, many worlds",
        sample=worlds,
        build=lambda task: None,
        tools=lambda world: [],
        verify=lambda task, world, answer: Verdict.of(answer == str(task.params["world"])),
        oracle=lambda task: [ToolCall("finish", {"answer": str(task.params["world"])})],
    )
    assert "1 instruction worded alike in two splits" in check_splits(hidden, draws=5)
    spelled = replace(hidden, oracle=lambda task: [ToolCall("finish", {"answer": "number"})])
    assert "1 instruction worded alike in two splits" in check_splits(spelled, draws=5)
    same = replace(hidden, oracle=lambda task: [ToolCall("finish", {"answer": "7"})])
    with pytest.raises(AssertionError, match="have the same solution"):
        check_splits(same, draws=5)


def test_one_program_over_hidden_worlds_in_two_splits_is_one_problem():
    # Every task reads the same and the oracle runs the same program over its hidden numbers
    # (Harbor's "sum the file"): the words and the plan are one problem whatever the numbers,
    # because an episode that solved a training task, replayed, passes every test task.
    def numbers(rng, difficulty):
        return TaskSpec("Write the sum of your numbers.", {"numbers": rng.sample(range(99), 3)})

    def tools(world):
        def total() -> str:
            """Write the sum of the numbers."""
            world["written"] = sum(world["numbers"])
            return "written"

        return [total]

    program = SimpleEnv(
        name="program",
        description="one program over hidden numbers",
        sample=numbers,
        build=lambda task: {"numbers": task.params["numbers"], "written": None},
        tools=tools,
        verify=lambda task, world, answer: Verdict.of(world["written"] == sum(world["numbers"])),
        oracle=lambda task: [ToolCall("total", {}), ToolCall("finish", {"answer": "done"})],
    )
    trained, tested = program.tasks("train", 1)[0], program.tasks("test", 5)
    assert all(replay(program, task, program.oracle(trained)).passed for task in tested)
    with pytest.raises(AssertionError, match="have the same solution"):
        check_splits(program, draws=5)


def three_problems(rng, difficulty):
    n = rng.randrange(3)
    return TaskSpec(f"Answer {n}.", {"n": n})


TINY = SimpleEnv(
    name="tiny",
    description="three problems",
    sample=three_problems,
    build=lambda task: {},
    tools=lambda world: [],
    verify=lambda task, world, answer: Verdict.of(answer == str(task.params["n"])),
    oracle=lambda task: [ToolCall("finish", {"answer": str(task.params["n"])})],
)


def test_an_env_too_small_for_n_test_tasks_fails_cleanly():
    report = check_env(TINY, n=200, split_draws=20)
    first = report.results[0]
    assert (first.name, first.passed) == ("test tasks", False)
    assert "could not draw 200 test tasks" in first.detail
    details = {r.name: r.detail for r in report.results}
    assert "not run: no test tasks" in details["oracle scores 1"]


def counted(task, world, answer):
    """Format credit: 0.2 for any number, 1 for the right one; passing needs the right one."""
    right = answer == str(task.params["a"] + task.params["b"])
    numeric = answer is not None and answer.lstrip("-").isdigit()
    return Verdict(score=1.0 if right else 0.2 if numeric else 0.0, passed=right, feedback="")


def test_format_credit_is_allowed_when_the_null_policy_neither_passes_nor_matches_the_oracle():
    credited = replace(calc, verify=lambda task, world, answer: counted(task, world, answer))
    pooled = SimpleEnv(
        name="sums",
        description="sums with format credit",
        sample=TaskPool(
            train=[TaskSpec(f"{a}+1", {"a": a, "b": 1}) for a in range(20)],
            probe=[TaskSpec(f"{a}+2", {"a": a, "b": 2}) for a in range(20)],
            test=[TaskSpec(f"{a}+3", {"a": a, "b": 3}) for a in range(20)],
        ),
        build=lambda task: {},
        tools=lambda world: [],
        verify=credited.verify,
        oracle=lambda t: [ToolCall("finish", {"answer": str(t.params["a"] + t.params["b"])})],
    )
    report = check_env(pooled, n=20, split_draws=40)
    assert report.passed, [r for r in report.results if not r.passed]


def test_null_failures_are_all_counted_and_noop_tasks_are_exempt():
    def lenient(task, world, answer):
        right = answer == str(task.params["n"])
        return Verdict.of(right or (task.params["n"] % 2 == 0 and answer == ""))

    specs = [TaskSpec(f"Answer {n}.", {"n": n}) for n in range(40)]
    env = SimpleEnv(
        name="lenient",
        description="passes the empty answer on even tasks",
        sample=TaskPool(train=specs[:20], probe=specs[20:30], test=specs[30:]),
        build=lambda task: {},
        tools=lambda world: [],
        verify=lenient,
        oracle=lambda task: [ToolCall("finish", {"answer": str(task.params["n"])})],
    )
    detail = dict((r.name, r.detail) for r in check_env(env, n=10, split_draws=20).results)
    null = detail["null scores below the oracle"]
    assert "passed or matched the oracle on 5/10 test tasks" in null
    assert "and 2 more" in detail["null scores below the oracle"]
    declared = TaskPool(
        train=specs[:20],
        probe=specs[20:30],
        test=[replace(s, noop_correct=s.params["n"] % 2 == 0) for s in specs[30:]],
    )
    report = check_env(replace(env, sample=declared), n=10, split_draws=20)
    detail = dict((r.name, r.detail) for r in report.results)
    assert detail["null scores below the oracle"].startswith("5/5 test tasks failed")
    assert "5 tasks declare doing nothing correct" in detail["null scores below the oracle"]


class _Short:
    """calc, except that tasks() returns at most two tasks whatever is asked."""

    def __getattr__(self, name):
        return getattr(calc, name)

    def tasks(self, *args, **kwargs):
        return calc.tasks(*args, **kwargs)[:2]


def test_an_env_that_returns_fewer_tasks_than_asked_is_named_and_the_check_ends():
    report = check_env(_Short(), n=20, split_draws=50)
    details = {r.name: r.detail for r in report.results if not r.passed}
    assert "returned only 2 tasks, fewer than asked" in details["test tasks"]
    assert "returned only 2 tasks, fewer than asked" in details["splits disjoint by problem"]
    # The other checks still ran, on the two tasks it did return.
    assert {r.name: r.detail for r in report.results}["oracle scores 1"] == (
        "2/2 test tasks scored 1"
    )


def leveled(split, levels):
    return [TaskSpec(f"{split} {n}", {"n": f"{split}{n}"}, difficulty=level)
            for n, level in enumerate(levels)]  # fmt: skip


def answer_env(pool, **options):
    return SimpleEnv(
        name="pooled",
        description="say the word",
        sample=pool,
        build=lambda task: {},
        tools=lambda world: [],
        verify=lambda task, world, answer: Verdict.of(answer == task.params["n"]),
        oracle=lambda task: [ToolCall("finish", {"answer": task.params["n"]})],
        **options,
    )


def test_a_pool_whose_dev_split_lacks_a_difficulty_passes_the_split_check_and_says_so():
    pool = TaskPool(train=leveled("train", [1, 2] * 5), probe=leveled("dev", [1] * 4),
                    test=leveled("test", [1, 2] * 3))  # fmt: skip
    detail = check_splits(answer_env(pool), draws=30)
    assert detail.endswith("none in two splits; probe holds none at difficulty 2")
    empty = TaskPool(train=leveled("train", [1, 2]), test=leveled("test", [1]))
    with pytest.raises(ValueError, match="no problem at any difficulty in split probe"):
        check_splits(answer_env(empty), draws=30)


def substring(task, world, answer):
    """A published scorer's rule: the answer passes if it contains the gold string."""
    return Verdict.of(answer is not None and task.params["n"] in answer)


def test_an_accepted_red_team_finding_is_reported_with_its_reason_and_passes_the_report():
    pool = TaskPool(train=leveled("train", [1] * 8), probe=leveled("dev", [1] * 4),
                    test=leveled("test", [1] * 4))  # fmt: skip
    loose = replace(answer_env(pool), verify=substring)
    found = {"red-team: hedged answer", "red-team: huge answer"}
    assert failing(check_env(loose, n=4, split_draws=20)) == found
    reason = "the benchmark's own scorer passes any answer containing the gold string"
    report = check_env(loose, n=4, split_draws=20, accept=dict.fromkeys(found, reason))
    assert report.passed and {r.name for r in report.accepted} == found
    huge = next(r for r in report.accepted if r.name == "red-team: huge answer")
    assert not huge.passed and huge.accepted == reason and "passed with the answer" in huge.detail
    declared = replace(loose, accepted_findings=dict.fromkeys(found, reason))
    assert check_env(declared, n=4, split_draws=20).accepted == report.accepted
    partly = check_env(loose, n=4, split_draws=20, accept={"red-team: huge answer": reason})
    assert not partly.passed and failing(partly) == found
    with pytest.raises(ValueError, match="only red-team findings can be accepted"):
        check_env(loose, n=4, split_draws=20, accept={"oracle scores 1": reason})
    with pytest.raises(ValueError, match="needs a reason"):
        check_env(loose, n=4, split_draws=20, accept={"red-team: huge answer": " "})
