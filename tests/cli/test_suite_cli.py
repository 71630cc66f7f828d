import json

import pytest
from typer.testing import CliRunner

from ratchet.cli import app

runner = CliRunner()


def test_eval_on_a_suite_reports_each_env_and_its_levels(tmp_path):
    out = ["--out", str(tmp_path), "-q"]
    shown = runner.invoke(app, ["eval", "calc,grid", "--agent", "oracle", "-n", "8", *out])
    assert shown.exit_code == 0, shown.output
    assert "calc all" in shown.output and "grid all" in shown.output
    played = runner.invoke(app, ["eval", "calc,grid", "--agent", "null", "-n", "8", "--json", *out])
    record = json.loads(played.stdout.splitlines()[0])
    assert record["env"] == "calc,grid" and record["pass@1"] == 0.0
    assert set(record["by_env"]) == {"calc", "grid"}
    assert {env: m["n"] for env, m in record["by_env"].items()} == {"calc": 4, "grid": 4}
    assert all(m["by_difficulty"] for m in record["by_env"].values())


def test_improve_on_a_suite_prints_each_env_and_level(tmp_path):
    args = ["improve", "calc,grid", "--model", "fake", "--levers", "exemplars", "--rounds", "1"]
    args += ["--train-tasks", "4", "--train-k", "1", "--probe-tasks", "8", "--test-tasks", "8"]
    args += ["--max-difficulty", "2", "--no-curve", "-q", "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for row in ("pass@1 calc ", "pass@1 grid ", "pass@1 calc level 2", "pass@1 grid level 1"):
        assert row in result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env"] == "calc,grid" and summary["config"]["env"] == "calc,grid"
    report = runner.invoke(app, ["report", str(tmp_path)])
    assert report.exit_code == 0, report.output


@pytest.mark.parametrize(
    ("command", "reference", "message"),
    [
        ("improve", "calc,,grid", "has an empty item"),
        ("improve", "calc,", "has an empty item"),
        ("eval", "calc,nope", "unknown env 'nope'"),
        ("check", "calc,calc", "calc came twice"),
        ("check", "calc,missing_env_file.py:env", "no env file missing_env_file.py"),
    ],
)
def test_a_bad_env_list_is_refused_with_a_clear_message(command, reference, message):
    result = runner.invoke(app, [command, reference])
    assert result.exit_code == 2 and message in " ".join(result.output.split())
    assert "Traceback" not in result.output
