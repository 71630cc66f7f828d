from dataclasses import replace

from ratchet.check import check_env
from ratchet.envs.calc import env as calc
from ratchet.tool import ToolCall
from ratchet.verdict import Verdict


def failing(report):
    return {r.name for r in report.results if not r.passed}


def test_calc_passes_every_check():
    report = check_env(calc, n=50)
    assert report.passed, report.results
    assert len(report.results) == 15
    assert sum(r.name.startswith("red-team: ") for r in report.results) == 8


def test_a_verifier_that_trusts_claims_is_caught():
    gullible = replace(calc, check=lambda task, world, answer: Verdict.of(bool(answer)))
    found = failing(check_env(gullible, n=10))
    assert "forged claim scores 0" in found and "red-team: prompt injection" in found


def test_a_wrong_oracle_is_caught():
    wrong = replace(calc, solve=lambda task: [ToolCall("finish", {"answer": "-1"})])
    assert "oracle scores 1" in failing(check_env(wrong, n=10))


def test_nondeterministic_episodes_are_caught():
    counter = iter(range(10**6))

    def leaky_tools(world):
        def tick() -> int:
            """Return a counter that never resets."""
            return next(counter)

        return [tick]

    def solve(task):
        return [ToolCall("tick", {}), *calc.solve(task)[-1:]]

    leaky = replace(calc, tools=leaky_tools, solve=solve)
    assert failing(check_env(leaky, n=10)) == {"determinism"}


def test_a_crashing_env_is_reported_not_raised():
    def explode(task):
        raise RuntimeError("no world today")

    report = check_env(replace(calc, build=explode), n=5)
    assert not report.passed
    assert any("no world today" in r.detail for r in report.results)
