import json
from pathlib import Path

from typer.testing import CliRunner

from ratchet.cli import app

runner = CliRunner()
JARS = str(Path(__file__).parents[1] / "forge" / "jars.py")
SMALL = ["--max-difficulty", "2", "--tasks-per-level", "60", "--check-tasks", "6",
         "--split-draws", "60"]  # fmt: skip


def test_forge_writes_an_env_that_ratchet_check_passes(tmp_path):
    out = tmp_path / "jars"
    result = runner.invoke(app, ["forge", f"{JARS}:jars", "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    assert "forge/jars passes all 16 checks" in result.output
    assert f"{out / 'env.py'}:env" in result.output
    checked = runner.invoke(
        app, ["check", f"{out / 'env.py'}:env", "-n", "6", "--split-draws", "60"]
    )
    assert checked.exit_code == 0, checked.output
    version = json.loads((out / "forge.json").read_text())["version"]
    tasks = runner.invoke(app, ["tasks", f"{out / 'env.py'}:env", "-n", "2", "--json"])
    assert tasks.exit_code == 0 and len(tasks.output.splitlines()) == 2
    assert len(version) == 12


def test_a_spec_needs_a_model(tmp_path):
    spec = tmp_path / "spec.md"
    spec.write_text("A to-do list.")
    result = runner.invoke(app, ["forge", str(spec)])
    assert result.exit_code == 2
    assert "needs --model openai:NAME" in result.output and "Traceback" not in result.output


def test_a_spec_the_model_cannot_serve_is_refused_with_the_report(tmp_path):
    spec = tmp_path / "spec.md"
    spec.write_text("A to-do list.")
    out = tmp_path / "todo"
    result = runner.invoke(app, ["forge", str(spec), "--model", "fake", "--out", str(out),
                                 "--max-repairs", "1"])  # fmt: skip
    assert result.exit_code == 1
    assert "no ```python code block" in result.output
    assert "did not pass ratchet check in 2 attempts" in result.output
    assert not out.exists()


def test_bad_sources_and_settings_are_one_line_errors(tmp_path):
    result = runner.invoke(app, ["forge", "json:dumps", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "not a forge Source" in result.output
    result = runner.invoke(app, ["forge", f"{JARS}:jars", "--question-share", "2"])
    assert result.exit_code == 2 and "--question-share is from 0 to 1" in result.output
    assert "Traceback" not in result.output
