import random
from dataclasses import replace

import pytest

from ratchet.core.task import make_task
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.envs.calc import env as calc
from ratchet.envs.check import check_env, check_splits
from ratchet.envs.registry import make_env


def failing(report):
    return {r.name for r in report.results if not r.passed}


def test_calc_passes_every_check():
    report = check_env(calc, n=50, split_draws=200)
    assert report.passed, report.results
    assert len(report.results) == 15
    assert sum(r.name.startswith("red-team") for r in report.results) == 8


def test_a_verifier_that_trusts_claims_is_caught():
    gullible = replace(calc, verify=lambda task, world, answer: Verdict.of(bool(answer)))
    caught = failing(check_env(gullible, n=10, split_draws=50))
    assert "forged claim scores 0" in caught and "red-team: prompt injection" in caught
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
