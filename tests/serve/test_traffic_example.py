"""End to end on CPU: the example agent's traffic improves the agent, which is served back."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("openai")

from ratchet.engine.store import Store
from servers import free_port, ratchet, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.model]

EXAMPLE = Path(__file__).parents[2] / "examples" / "traffic_agent.py"
# The traffic joins the run's own practice. Alone (--train-tasks 0) it taught nothing here:
# generated with the application's demonstrations in the prompt, its turns already had a
# training loss of 0.04 (0.0003 after 15 steps) and the candidate passed 0 of 16 probe tasks.
IMPROVE = [
    "--levers", "rft", "--rounds", "1", "--train-tasks", "16", "--train-k", "2",
    "--probe-tasks", "16", "--test-tasks", "8", "--train-steps", "20", "--quiet",
]  # fmt: skip
QUIET = {**os.environ, "OMP_NUM_THREADS": "1"}


def serving(agent, store, log):
    """Start ``ratchet serve AGENT`` (the embedded model, no key); return it and its URL."""
    port = free_port()
    command = [ratchet(), "serve", agent, "--env", "calc", "--store", str(store)]
    command += ["--port", str(port), "--threads", "1"]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=QUIET)
    url = f"http://127.0.0.1:{port}/v1"
    wait_for(f"{url}/models", server)
    return server, url


def ask(url, questions, seed, *options):
    command = [sys.executable, str(EXAMPLE), "--base-url", url, "-n", str(questions)]
    done = subprocess.run(
        [*command, "--seed", str(seed), *options], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def stop(server):
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal


def test_traffic_with_verdicts_improves_the_agent_that_is_then_served_back(tmp_path):
    with (tmp_path / "serve.log").open("w") as log:
        server, url = serving("base", tmp_path / "traffic", log)
        try:
            print(ask(url, 48, 0))
        finally:
            stop(server)
    with Store(tmp_path / "traffic") as store:
        judged = [t for _, t in store.trajectories() if t.verdict is not None]
    assert len(judged) == 48 and sum(t.passed for t in judged) >= 8
    generated = [step for t in judged for step in t.steps if not step.given]
    demonstrations = [step for t in judged for step in t.steps if step.given]
    assert len(demonstrations) == 6 * 48  # the application's own worked questions
    assert all(s.tokens is None for s in demonstrations)
    assert all(s.tokens is not None and s.tokens.model == "local" for s in generated)
    assert all(s.tokens.completion_ids and s.tokens.prompt_ids for s in generated)

    improve = [ratchet(), "improve", "calc", "--experience", str(tmp_path / "traffic")]
    improve += ["--out", str(tmp_path / "run"), *IMPROVE]
    done = subprocess.run(improve, capture_output=True, text=True, timeout=3600, env=QUIET)
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout)
    said = " ".join((done.stdout + done.stderr).split())  # the console wraps long lines
    assert "48 verified episodes" in said
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    [candidate] = summary["rounds"][0]["candidates"]
    assert candidate["lever"] == "rft" and candidate["accepted"], candidate
    final = tmp_path / "run" / "agents" / summary["final_version"]
    assert (final / "adapter" / "adapter_config.json").is_file()

    with (tmp_path / "serve-final.log").open("w") as log:
        server, url = serving(str(final), tmp_path / "traffic-final", log)
        try:
            print(ask(url, 8, 1, "--no-demos"))
        finally:
            stop(server)
    with Store(tmp_path / "traffic-final") as store:
        served_back = [t for _, t in store.trajectories()]
    assert len(served_back) == 8
    assert {t.agent for t in served_back} == {summary["final_version"]}
