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
    result = runner.invoke(app, ["check", "calc", "-n", "20", "--split-draws", "100"])
    assert result.exit_code == 0, result.output
    assert "passes all 15 checks" in result.output
    assert "red-team: hedged answer" in result.output


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


def test_improve_offers_every_lever_and_rejects_unknown_or_repeated_ones(tmp_path):
    help_text = runner.invoke(app, ["improve", "--help"]).output
    for lever in ("exemplars", "insights", "rft", "skills", "prompt", "tasks"):
        assert f"{lever}:" in help_text
    out = ["--out", str(tmp_path), "--model", "fake", "-q"]
    unknown = runner.invoke(app, ["improve", "calc", "--levers", "skills,magic", *out])
    assert unknown.exit_code == 2 and "unknown lever(s) magic" in unknown.output
    twice = runner.invoke(app, ["improve", "calc", "--levers", "tasks,tasks", *out])
    assert twice.exit_code == 2 and "named more than once: tasks" in twice.output
    assert "Traceback" not in unknown.output + twice.output


def test_eval_oracle_and_null_json(tmp_path):
    out = ["--out", str(tmp_path)]
    oracle = runner.invoke(app, ["eval", "calc", "--agent", "oracle", "-n", "10", "--json", *out])
    assert oracle.exit_code == 0, oracle.output
    record = json.loads(oracle.stdout)
    assert record["pass@1"] == 1.0 and record["agent"] == "oracle" and record["n"] == 10
    assert set(record) >= {
        "env",
        "model",
        "split",
        "k",
        "pass@k",
        "pass^k",
        "mean_score",
        "ci95",
        "tokens_per_task",
        "seconds_per_task",
        "by_difficulty",
    }
    null = runner.invoke(app, ["eval", "calc", "--agent", "null", "-n", "10", "--json", *out])
    assert json.loads(null.stdout)["pass@1"] == 0.0
    assert (tmp_path / "report" / "index.html").exists()


def test_eval_rejects_bad_agents_and_models():
    bad_agent = runner.invoke(app, ["eval", "calc", "--agent", "nowhere"])
    assert bad_agent.exit_code == 2 and "not base, oracle, null" in bad_agent.output
    bad_model = runner.invoke(app, ["eval", "calc", "--model", "gpt:9"])
    assert bad_model.exit_code == 2 and "unknown model 'gpt:9'" in bad_model.output


def test_run_show_export_and_resume(tmp_path):
    store = tmp_path / "store"
    args = ["run", "calc", "--out", str(store), "--agent", "oracle", "-n", "4", "-q"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "4 new episodes, 4 in total" in first.output
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = runner.invoke(app, [*args, "--resume"])
    assert "0 new episodes, 4 in total" in resumed.output
    shown = runner.invoke(app, ["show", "1", "--store", str(store)])
    assert shown.exit_code == 0 and "PASSED" in shown.output and "finish" in shown.output
    missing = runner.invoke(app, ["show", "99", "--store", str(store)])
    assert missing.exit_code == 2 and "no trajectory 99" in missing.output
    out = tmp_path / "out.jsonl"
    exported = runner.invoke(app, ["export", str(store), "--out", str(out)])
    assert exported.exit_code == 0 and len(out.read_text().splitlines()) == 4


def no_traceback(result, code=2):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def test_store_problems_are_one_line_errors(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    out = no_traceback(
        runner.invoke(app, ["eval", "calc", "--agent", "oracle", "--out", str(a_file)])
    )
    assert "not a directory" in out
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "ratchet.db").write_bytes(b"this is not sqlite" * 100)
    out = no_traceback(
        runner.invoke(app, ["eval", "calc", "--agent", "oracle", "--out", str(corrupt)])
    )
    assert "not a usable ratchet store" in out
    newer = tmp_path / "newer"
    newer.mkdir()
    import sqlite3

    with sqlite3.connect(newer / "ratchet.db") as db:
        db.execute("PRAGMA user_version = 999")
    out = no_traceback(
        runner.invoke(app, ["eval", "calc", "--agent", "oracle", "--out", str(newer)])
    )
    assert "999" in out


def test_read_only_output_is_a_one_line_error(tmp_path):
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # running as a user that ignores permissions
            return
        result = runner.invoke(
            app, ["eval", "calc", "--agent", "oracle", "--out", str(locked / "x")]
        )
        no_traceback(result)
    finally:
        locked.chmod(0o700)


def test_export_to_a_missing_directory_is_a_clear_error(tmp_path):
    runner.invoke(
        app, ["eval", "calc", "--agent", "oracle", "-n", "2", "--out", str(tmp_path / "s"), "-q"]
    )
    out = no_traceback(
        runner.invoke(
            app, ["export", str(tmp_path / "s"), "--out", str(tmp_path / "no/such/x.jsonl")]
        )
    )
    assert "does not exist" in out


def test_absurd_task_counts_are_refused_at_once():
    out = no_traceback(runner.invoke(app, ["tasks", "calc", "-n", "100000000"]))
    assert "100000" in out


def test_run_resume_with_other_settings_is_refused(tmp_path):
    args = ["run", "calc", "--agent", "oracle", "-n", "3", "--out", str(tmp_path), "-q"]
    assert runner.invoke(app, args).exit_code == 0
    out = no_traceback(
        runner.invoke(app, [*args[:-3], "-n", "4", "--out", str(tmp_path), "--resume"])
    )
    assert "with these settings" in " ".join(out.split()) and "'n': 4" in out


def test_eval_where_every_model_call_fails_exits_non_zero_and_names_the_error(tmp_path):
    out = no_traceback(
        runner.invoke(
            app,
            [
                "eval",
                "calc",
                "--model",
                "openai:m",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "-n",
                "2",
                "--out",
                str(tmp_path),
                "-q",
            ],
        )
    )
    assert "127.0.0.1:9" in out or "every model call failed" in out
