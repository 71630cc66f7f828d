from typer.testing import CliRunner

from ratchet.cli import app


def test_improve_prints_base_against_final_with_the_interval_method(tmp_path):
    arguments = ["improve", "calc", "--model", "fake", "--levers", "exemplars", "--rounds", "1"]
    arguments += ["--train-tasks", "4", "--train-k", "1", "--probe-tasks", "8"]
    arguments += ["--test-tasks", "4", "--no-curve", "-q", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert "final pass@1 95% CI" in result.output and (tmp_path / "summary.json").exists()
