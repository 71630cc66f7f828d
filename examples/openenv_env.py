"""An env from an OpenEnv server: the guessing game of ``servers/guess_openenv.py``.

Importing this file starts that server on a free local port (in a background thread) and
connects to it like any OpenEnv server: tasks and splits come from the server's Task API, the
agent's ``step`` tool takes the server's action schema, and the score is the server's reward.

    ratchet check examples/openenv_env.py:env -n 10
    ratchet eval examples/openenv_env.py:env --model local -n 4
"""

import importlib.util
import socket
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from ratchet import Task, ToolCall
from ratchet.integrations.openenv import openenv_env


def load_server():
    path = Path(__file__).parent / "servers" / "guess_openenv.py"
    spec = importlib.util.spec_from_file_location("ratchet_example_openenv_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start(app) -> str:
    """Serve ``app`` on a free port in a daemon thread; return its URL once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the example OpenEnv server did not start on {url}")


SERVER = load_server()
URL = start(SERVER.app)


def oracle(task: Task) -> list[ToolCall]:
    """The env author knows the secrets: guess right at once."""
    reset = task.params["reset"]
    return [ToolCall("step", {"guess": SERVER.SECRETS[reset["split"]][reset["index"]]})]


env = openenv_env(
    URL,
    name="example/openenv-guess",
    oracle=oracle,
    max_sessions=16,
    description="Guess a secret number on an OpenEnv server.",
)
