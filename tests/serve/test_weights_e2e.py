"""End to end on CPU: improve a served model's weights through ``ratchet serve`` as the server."""

import json
import os
import subprocess

import httpx
import pytest

pytest.importorskip("fastapi")

from ratchet.core.agent import Agent
from servers import free_port, ratchet, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.model]

IMPROVE = [
    "--levers", "rft", "--rounds", "1", "--train-tasks", "16", "--train-k", "2",
    "--probe-tasks", "12", "--test-tasks", "8", "--train-steps", "20", "--quiet",
]  # fmt: skip


def test_rft_through_ratchet_serve_accepts_an_adapter_that_the_server_then_serves(tmp_path):
    from ratchet.engine.models.checkpoints import embedded_model_file

    Agent(model="local").save(tmp_path / "served")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    serve = [ratchet(), "serve", str(tmp_path / "served"), "--name", "smol", "--no-memory"]
    serve += ["--threads", "1", "--port", str(port), "--store", str(tmp_path / "traffic")]
    serve += ["--lora-root", str(tmp_path)]  # the run directory registers its adapters here
    with (tmp_path / "serve.log").open("w") as log:
        server = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(f"{url}/models", server)
        improve = [ratchet(), "improve", "calc", "--model", "openai:smol", "--base-url", url]
        improve += ["--weights", str(embedded_model_file()), "--out", str(tmp_path / "run")]
        # One torch thread: threads that compete with other busy processes slow down many-fold.
        quiet_torch = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(
            improve + IMPROVE, capture_output=True, text=True, timeout=3600, env=quiet_torch
        )
        assert done.returncode == 0, done.stdout + done.stderr
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        [candidate] = summary["rounds"][0]["candidates"]
        assert candidate["lever"] == "rft" and candidate["accepted"], candidate
        assert summary["final_version"] == "v1"
        models = httpx.get(f"{url}/models").json()["data"]
        [adapter] = [m for m in models if m["parent"] == "smol"]
        assert adapter["id"].startswith("ratchet-v1-")
        assert adapter["root"] == str((tmp_path / "run" / "agents" / "v1" / "adapter").resolve())
        tools = [{"type": "function", "function": {"name": "finish", "parameters": {}}}]
        body = {"model": adapter["id"], "messages": [{"role": "user", "content": "Hi"}]}
        reply = httpx.post(f"{url}/chat/completions", json={**body, "tools": tools}, timeout=300)
        assert reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == (
            "finish"
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
