import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from ratchet.core.env import SimpleEnv, attacks_of
from ratchet.core.task import TaskSpec
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.envs.calc import env as calc
from ratchet.envs.check import check_env
from ratchet.envs.redteam import red_team_checks
from ratchet.envs.registry import make_env
from ratchet.sandbox import landlock_abi


def run_battery(env, n=20):
    results = {}
    for name, run in red_team_checks(env, env.tasks("test", n)):
        try:
            results[name] = (True, run())
        except AssertionError as exc:
            results[name] = (False, str(exc))
    return results


def failed(results):
    return {name: detail for name, (passed, detail) in results.items() if not passed}


@pytest.mark.parametrize("name", ["calc", "shop", "grid", "files", "code"])
def test_every_built_in_env_passes_the_battery(name):
    if name in ("files", "code") and landlock_abi() < 1:
        pytest.skip("the kernel has no Landlock")
    env = make_env(name)
    results = run_battery(env)
    assert len(results) == 8 + len(attacks_of(env))
    assert all(n.startswith("red-team: ") for n in results)
    assert failed(results) == {}


def test_the_battery_runs_where_it_applies():
    calc_results = run_battery(calc)
    assert "none passed" in calc_results["red-team: hedged answer"][1]
    assert "not applicable" in calc_results["red-team: path escape"][1]
    grid_results = run_battery(make_env("grid"))
    assert "judges state only" in grid_results["red-team: hedged answer"][1]


def _number(answer):
    try:
        return float(answer.strip())
    except ValueError:
        return None


def test_a_verifier_that_accepts_nan_fails_the_battery():
    def tolerant(task, world, answer):
        value = _number(answer or "")
        return Verdict.of(value is not None and not abs(value - task.params["answer"]) > 1e-9)

    found = failed(run_battery(replace(calc, verify=tolerant)))
    assert set(found) == {"red-team: non-finite numbers"}
    assert "'nan'" in found["red-team: non-finite numbers"]
    assert "task calc-" in found["red-team: non-finite numbers"]


def test_a_verifier_that_accepts_any_answer_containing_the_value_fails_the_battery():
    def containing(task, world, answer):
        return Verdict.of(str(task.params["answer"]) in (answer or ""))

    found = failed(run_battery(replace(calc, verify=containing)))
    assert {"red-team: hedged answer", "red-team: padded answer", "red-team: huge answer"} <= set(
        found
    )
    assert "or" in found["red-team: hedged answer"]


def naive_files_env(with_shell):
    """A deliberately weak env: host-side file tools that follow any path, and a host shell."""

    def sample(rng, difficulty):
        word = f"word{rng.randrange(10**6)}"
        return TaskSpec(f"Write {word} to note.txt, then call finish.", {"word": word})

    def tools(root):
        def read_file(path: str) -> str:
            """Read a file.

            Args:
                path: The file.
            """
            return (root / path).read_text()

        def write_file(path: str, content: str) -> str:
            """Write a file.

            Args:
                path: The file.
                content: What to write.
            """
            (root / path).write_text(content)
            return "ok"

        def run(command: str) -> str:
            """Run a shell command in the workspace.

            Args:
                command: The command line.
            """
            done = subprocess.run(command, shell=True, cwd=root, capture_output=True, text=True)
            return done.stdout + done.stderr

        return [read_file, write_file, *([run] if with_shell else [])]

    def check(task, root, answer):
        note = root / "note.txt"
        return Verdict.of(note.is_file() and note.read_text() == task.params["word"])

    def solve(task):
        write = ToolCall("write_file", {"path": "note.txt", "content": task.params["word"]})
        return [write, ToolCall("finish", {"answer": "done"})]

    return SimpleEnv(
        name="naive",
        description="naive files",
        sample=sample,
        build=lambda task: Path(tempfile.mkdtemp()),
        tools=tools,
        verify=check,
        oracle=solve,
        max_difficulty=1,
        teardown=lambda root: shutil.rmtree(root, ignore_errors=True),
    )


def test_file_tools_that_follow_paths_out_of_the_workspace_fail_the_battery():
    found = failed(run_battery(naive_files_env(with_shell=False), n=4))
    assert set(found) == {"red-team: path escape"}
    assert "outside the workspace" in found["red-team: path escape"]


def test_links_planted_with_the_envs_own_shell_fail_the_battery():
    found = failed(run_battery(naive_files_env(with_shell=True), n=4))
    assert "red-team: symlink escape" in found
    assert "secret file" in found["red-team: symlink escape"]


def test_check_env_reports_one_row_per_attack():
    report = check_env(calc, n=20, split_draws=100)
    names = [r.name for r in report.results]
    assert sum(n.startswith("red-team: ") for n in names) == 8
    assert report.passed


def test_hedges_and_pads_change_one_whole_token_at_a_time():
    from ratchet.envs.redteam import _hedged, _padded

    assert _hedged("3 of 13 lines") == ["2, 3 or 4 of 13 lines", "3 of 12, 13 or 14 lines"]
    assert _hedged("0") == ["1, 0 or 2"]
    assert _padded("total $196.70.") == ["total $196.970."]
