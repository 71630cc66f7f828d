import json
import re
from pathlib import Path

import pytest
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
    assert "passes all 16 checks" in result.output
    assert "red-team: hedged answer" in result.output
    left_out = "optional members left out (their defaults apply): policy, split_of_params"
    assert left_out in result.output


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


KV = Path(__file__).parents[2] / "examples" / "kv_env.py"


def test_check_and_eval_take_a_file_reference(tmp_path):
    checked = runner.invoke(app, ["check", f"{KV}:env", "-n", "10", "--split-draws", "50"])
    assert checked.exit_code == 0, checked.output
    evaluated = runner.invoke(
        app, ["eval", f"{KV}:env", "--agent", "oracle", "-n", "4", "--json", "--out", str(tmp_path)]
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout)["pass@1"] == 1.0


def test_run_and_improve_take_a_module_reference(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(KV.parent))
    stored = runner.invoke(
        app, ["run", "kv_env:env", "--agent", "oracle", "-n", "3", "--out", str(tmp_path / "s")]
    )
    assert stored.exit_code == 0, stored.output
    improved = runner.invoke(
        app,
        ["improve", "kv_env:env", "--model", "fake", "--levers", "exemplars", "--rounds", "1",
         "--train-tasks", "4",
         "--probe-tasks", "6", "--test-tasks", "4", "--out", str(tmp_path / "i")],
    )  # fmt: skip
    assert improved.exit_code == 0, improved.output
    assert (tmp_path / "i" / "summary.json").exists()


def test_a_bad_reference_and_a_tiny_env_are_clear_failures(tmp_path):
    missing = runner.invoke(app, ["check", "nosuch_module_xyz:env"])
    assert missing.exit_code != 0 and "Traceback" not in missing.output
    assert "nosuch_module_xyz" in missing.output
    tiny = tmp_path / "tiny.py"
    tiny.write_text(
        "import random\n"
        "from ratchet import SimpleEnv, TaskSpec, ToolCall, Verdict\n"
        "def sample(rng: random.Random, difficulty: int) -> TaskSpec:\n"
        "    n = rng.randrange(3)\n"
        "    return TaskSpec(f'Answer {n}.', {'n': n})\n"
        "env = SimpleEnv(name='tiny', description='three problems', sample=sample,\n"
        "    build=lambda t: {}, tools=lambda w: [],\n"
        "    verify=lambda t, w, a: Verdict.of(a == str(t.params['n'])),\n"
        "    oracle=lambda t: [ToolCall('finish', {'answer': str(t.params['n'])})])\n"
    )
    result = runner.invoke(app, ["check", f"{tiny}:env", "--split-draws", "20"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "could not draw 200 test tasks" in result.output


def test_export_adds_token_ids_with_a_tokenizer(tmp_path):
    store = tmp_path / "store"
    ran = runner.invoke(app, ["run", "calc", "--agent", "oracle", "-n", "2", "--out", str(store)])
    assert ran.exit_code == 0, ran.output
    bad = runner.invoke(
        app, ["export", str(store), "--out", str(tmp_path / "x.jsonl"), "--tokenizer", "/nope"]
    )
    assert bad.exit_code == 2 and "no tokenizer at '/nope'" in bad.output
    out = tmp_path / "t.jsonl"
    exported = runner.invoke(app, ["export", str(store), "--out", str(out), "--tokenizer", "local"])
    if exported.exit_code != 0 and "no tokenizer" in exported.output:
        pytest.skip("no embedded tokenizer here")
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2
    assert all(len(r["input_ids"]) == len(r["token_loss_mask"]) > 0 for r in lines)


def test_rollout_options_are_offered_and_reach_the_episodes(tmp_path, monkeypatch):
    from ratchet.engine.models.fake import FakeModel
    from ratchet.engine.store import Store

    options = ["--threads", "--concurrency", "--max-reply-tokens", "--max-turns"]
    options += ["--max-episode-tokens", "--timeout-s", "--keep-turns"]
    for command in ("eval", "run", "improve"):
        shown = runner.invoke(app, [command, "--help"], env={"COLUMNS": "240"}).output
        assert all(option in shown for option in options), command
    built = []

    def load(spec, base_url, adapter, threads):
        built.append(threads)
        model = FakeModel(script=[json.dumps({"name": "add", "arguments": {"a": 1, "b": 2}})])
        model.context_window = 10_000
        return model

    monkeypatch.setattr("ratchet.cli.episodes.load_model", load)
    store = tmp_path / "store"
    args = ["run", "calc", "--out", str(store), "--model", "fake", "-n", "2", "-q"]
    args += ["--threads", "1", "--concurrency", "2", "--max-turns", "3", "--timeout-s", "60"]
    result = runner.invoke(app, [*args, "--keep-turns", "1", "--max-reply-tokens", "16"])
    assert result.exit_code == 0, result.output
    assert built == [1]
    with Store(store) as opened:
        played = [trajectory for _, trajectory in opened.trajectories()]
    assert len(played) == 2 and all(len(t.steps) == 3 and t.truncated for t in played)


def test_improve_prints_base_against_final_with_the_interval_method(tmp_path):
    arguments = ["improve", "calc", "--model", "fake", "--levers", "exemplars", "--rounds", "1"]
    arguments += ["--train-tasks", "4", "--train-k", "1", "--probe-tasks", "8"]
    arguments += ["--test-tasks", "4", "--no-curve", "-q", "--out", str(tmp_path)]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert "final pass@1 95% CI" in result.output and (tmp_path / "summary.json").exists()


def test_improve_offers_the_learning_levers_and_refuses_a_bad_demos_source(tmp_path):
    help_text = runner.invoke(app, ["improve", "--help"]).output
    for word in ("pairs", "grpo", "demos", "--lever-option", "LEVER.FIELD=VALUE"):
        assert word in help_text
    assert "--beta" not in help_text  # deprecated: it still works, unlisted
    missing = str(tmp_path / "none.jsonl")
    demos = ["improve", "calc", "--levers", "demos", "--lever-option"]
    bad = runner.invoke(app, [*demos, f"demos.source={missing}"])
    assert bad.exit_code == 2 and "neither oracle, teacher nor a JSONL file" in bad.output
    assert "Traceback" not in bad.output
    teacher = runner.invoke(app, [*demos, "demos.source=teacher"])
    assert teacher.exit_code == 2 and "--reflector" in teacher.output


def test_an_old_lever_flag_still_works_and_names_its_new_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = runner.invoke(app, ["improve", "calc", "--levers", "demos", "--demos", "none.jsonl"])
    said = " ".join(old.output.split())
    assert old.exit_code == 2 and "neither oracle, teacher nor a JSONL file" in said
    assert "--demos are deprecated and go in the next release; use --lever-option " in said
    assert "demos.source=none.jsonl" in said


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("pairs.beta=high", "lever option pairs.beta takes a float; got 'high'"),
        ("pair.beta=0.1", "unknown lever 'pair' in a lever option; known: exemplars"),
        ("pairs.betta=0.1", "lever pairs has no setting 'betta'; its settings: steps"),
        ("pairs", "--lever-option takes LEVER.FIELD=VALUE (e.g. pairs.beta=0.1); got 'pairs'"),
        ("rft.steps=5", "a lever option sets rft, which is not among the run's levers (pairs)"),
    ],
)
def test_a_bad_lever_option_is_a_clear_error_before_any_model_loads(option, message):
    result = runner.invoke(
        app,
        [
            "improve",
            "calc",
            "--model",
            "nosuch:model",
            "--levers",
            "pairs",
            "--lever-option",
            option,
        ],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert message in " ".join(result.output.split())


def test_improve_runs_to_the_end_and_prints_the_comparison(tmp_path):
    args = ["improve", "calc", "--model", "fake", "--levers", "exemplars", "--rounds", "1"]
    args += ["--train-tasks", "4", "--probe-tasks", "8", "--test-tasks", "4"]
    args += ["--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "final pass@1 95% CI" in result.output and "wilson" in result.output
    assert (tmp_path / "summary.json").exists()


def test_a_file_env_imports_the_modules_beside_it(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "bench_rows.py").write_text("ROWS = [('one', '1'), ('two', '2'), ('three', '3')]\n")
    (bench / "bench_env.py").write_text(
        "from bench_rows import ROWS\n"
        "from ratchet import SimpleEnv, TaskPool, TaskSpec, ToolCall, Verdict\n"
        "specs = [TaskSpec(f'Write {word} as a digit.', {'d': d}) for word, d in ROWS]\n"
        "def verify(task, world, answer):\n"
        "    import bench_rows  # a sibling imported later, inside the env's own code\n"
        "    return Verdict.of(answer == task.params['d'] and bool(bench_rows.ROWS))\n"
        "env = SimpleEnv(name='digits', description='', build=lambda t: None,\n"
        "    sample=TaskPool(train=specs[:1], probe=specs[1:2], test=specs[2:]),\n"
        "    tools=lambda w: [], verify=verify,\n"
        "    oracle=lambda t: [ToolCall('finish', {'answer': t.params['d']})])\n"
    )
    reference = f"{bench / 'bench_env.py'}:env"
    listed = runner.invoke(app, ["tasks", reference, "--split", "test", "-n", "1", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)["instruction"] == "Write three as a digit."
    evaluated = runner.invoke(app, ["eval", reference, "--agent", "oracle", "-n", "1", "--json",
                                    "-q", "--out", str(tmp_path / "eval")])  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout.splitlines()[0])["pass@1"] == 1.0


SHORT_ENV = '''
from ratchet.envs.calc import env as _calc


class Short:
    """calc, except that tasks() returns at most two tasks whatever is asked."""

    def __getattr__(self, name):
        return getattr(_calc, name)

    def tasks(self, *args, **kwargs):
        return _calc.tasks(*args, **kwargs)[:2]


env = Short()
'''


def test_tasks_and_check_stop_on_an_env_that_returns_fewer_tasks_than_asked(tmp_path):
    (tmp_path / "short.py").write_text(SHORT_ENV)
    reference = f"{tmp_path / 'short.py'}:env"
    listed = runner.invoke(app, ["tasks", reference, "-n", "5"])
    assert listed.exit_code == 2 and "Traceback" not in listed.output
    assert "returned only 2 tasks, fewer than asked" in " ".join(listed.output.split())
    checked = runner.invoke(app, ["check", reference, "-n", "5", "--split-draws", "20"],
                            env={"COLUMNS": "400"})  # fmt: skip
    assert checked.exit_code == 1 and "returned only 2 tasks, fewer than asked" in checked.output
    played = runner.invoke(app, ["eval", reference, "--agent", "oracle", "-n", "5", "-q",
                                 "--out", str(tmp_path / "eval")])  # fmt: skip
    assert played.exit_code == 2 and "fewer than asked" in " ".join(played.output.split())


def test_the_worked_benchmark_port_passes_check_with_its_accepted_findings_shown():
    port = Path(__file__).parents[2] / "examples" / "miniqa" / "env.py"
    result = runner.invoke(app, ["check", f"{port}:env", "-n", "6"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "probe holds none at difficulty 2" in result.output
    assert "1 tasks declare doing nothing correct" in result.output
    assert "passes 13 of 16 checks, with 3 red-team finding(s) accepted knowingly" in result.output
    accepted = [line for line in result.output.splitlines() if "│ accepted │" in line]
    assert len(accepted) == 3 and all("the port keeps it; finding:" in line for line in accepted)


LOOSE_ENV = """
from ratchet import SimpleEnv, TaskPool, TaskSpec, ToolCall, Verdict

specs = [TaskSpec(f"Say word {n}.", {"word": f"w{n}x"}) for n in range(12)]
env = SimpleEnv(
    name="loose", description="", build=lambda t: None, tools=lambda w: [],
    sample=TaskPool(train=specs[:6], probe=specs[6:8], test=specs[8:]),
    verify=lambda t, w, a: Verdict.of(a is not None and t.params["word"] in a),
    oracle=lambda t: [ToolCall("finish", {"answer": t.params["word"]})],
)
"""


def test_check_accepts_a_red_team_finding_only_with_a_reason_and_shows_it(tmp_path):
    (tmp_path / "loose.py").write_text(LOOSE_ENV)
    args = ["check", f"{tmp_path / 'loose.py'}:env", "-n", "4", "--split-draws", "20"]
    wide = {"COLUMNS": "400"}
    refused = runner.invoke(app, args, env=wide)
    assert refused.exit_code == 1 and "FAIL" in refused.output
    accept = ["--accept", "huge answer=the scorer is a substring match",
              "--accept", "red-team: hedged answer=the scorer is a substring match"]  # fmt: skip
    accepted = runner.invoke(app, [*args, *accept], env=wide)
    assert accepted.exit_code == 0, accepted.output
    assert "accepted: the scorer is a substring match; finding:" in accepted.output
    assert "2 red-team finding(s) accepted knowingly (red-team: hedged answer, red-team: huge" in (
        accepted.output
    )
    for bad, said in (("huge answer", 'takes CHECK="REASON"'), ("determinism=why", "not one")):
        result = runner.invoke(app, [*args, "--accept", bad], env=wide)
        assert result.exit_code == 2 and said in result.output


def test_improve_refuses_zero_rounds_before_any_model_loads(tmp_path, monkeypatch):
    import ratchet.cli.improve as improve_cli

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(improve_cli, "load_model", no_model)
    monkeypatch.setattr(improve_cli, "run_improve", no_model)
    result = runner.invoke(app, ["improve", "calc", "--rounds", "0", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--rounds must be at least 1" in result.output
    assert "Traceback" not in result.output and not any(tmp_path.iterdir())


def test_an_interrupted_improve_says_how_to_resume_and_exits_130(tmp_path, monkeypatch):
    import ratchet.cli.improve as improve_cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(improve_cli, "run_improve", interrupted)
    result = runner.invoke(
        app, ["improve", "calc", "--model", "fake", "-q", "--out", str(tmp_path)]
    )
    assert result.exit_code == 130
    assert "interrupted" in result.output and "--resume" in result.output
    assert "Traceback" not in result.output


def test_improve_help_groups_options_in_panels_with_full_flag_names():
    from ratchet.cli.options import _leaves
    from ratchet.improve.config import ImproveConfig

    text = runner.invoke(app, ["improve", "--help"], env={"COLUMNS": "80"}).output
    titles = re.findall(r"╭─ (\w+) ─", text)
    assert titles == ["Arguments", "Options", "Run", "Budget", "Levers", "Gate", "Output",
                      "Advanced"]  # fmt: skip
    assert "…" not in text
    for item, *_ in _leaves(ImproveConfig):
        flag = item.metadata.get("flag", f"--{item.name.replace('_', '-')}")
        if item.name != "env" and "moved" not in item.metadata:
            assert f"{flag} " in text, item.name
    assert "task --train-k" in text and "train_k" not in text


def test_the_command_line_imports_no_model_engine_or_server_until_a_command_needs_one() -> None:
    import subprocess
    import sys

    heavy = ("torch", "transformers", "peft", "openai", "uvicorn", "fastapi")
    probe = f"import sys, ratchet.cli; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == ""
