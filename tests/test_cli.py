import json

from typer.testing import CliRunner

from ratchet.cli import app

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("ratchet ")


def test_envs_lists_calc():
    result = runner.invoke(app, ["envs"])
    assert result.exit_code == 0 and "calc" in result.output


def test_tasks_json():
    result = runner.invoke(app, ["tasks", "calc", "--split", "test", "-n", "3", "--json"])
    assert result.exit_code == 0
    tasks = [json.loads(line) for line in result.output.splitlines()]
    assert len(tasks) == 3 and {t["split"] for t in tasks} == {"test"}


def test_check_calc_exits_zero():
    result = runner.invoke(app, ["check", "calc", "-n", "20"])
    assert result.exit_code == 0, result.output
    assert "passes all 7 checks" in result.output


def test_unknown_env_is_a_clear_error():
    result = runner.invoke(app, ["tasks", "nosuch"])
    assert result.exit_code == 2
    assert "unknown env 'nosuch'; known envs:" in result.output
    assert "calc" in result.output and "Traceback" not in result.output


def test_bad_options_are_clear_errors():
    bad_split = runner.invoke(app, ["tasks", "calc", "--split", "dev"])
    assert bad_split.exit_code == 2 and "--split must be one of" in bad_split.output
    bad_level = runner.invoke(app, ["tasks", "calc", "--difficulty", "9"])
    assert bad_level.exit_code == 2 and "difficulty for calc must be in 1..5" in bad_level.output
