"""Shared pieces of the ``ratchet serve`` tests: a server over a fake model, and its clients."""

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ratchet.core.agent import Agent
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.store import Store
from ratchet.serve.config import ServeConfig
from ratchet.serve.conversations import ServedMemory
from ratchet.serve.models import ServedModels
from ratchet.serve.recorder import Recorder

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}


def call_first_tool(prompt, rng):
    if not prompt.tools:
        return "plain words"
    name = prompt.tools[0]["function"]["name"]
    return json.dumps({"name": name, "arguments": {"a": 2, "b": 3}})


class Recording(FakeModel):
    """A fake that keeps the prompts and sampling settings it was asked to complete with."""

    def complete(self, prompts, sampling):
        self.prompts = [*getattr(self, "prompts", []), *prompts]
        self.samplings = [*getattr(self, "samplings", []), sampling]
        return super().complete(prompts, sampling)


def make_server(
    tmp_path, agent=None, model=None, api_keys=(), memory=True, build=None, config=None, **models
):
    """A server app over ``model`` (default: a :class:`Recording` that calls the first tool).

    Returns ``(server, model, store)``; ``create_app(server)`` is the app.
    """
    from ratchet.serve.app import Server

    agent = agent or Agent(version="v3", model="fake")
    model = model or Recording(reply=call_first_tool)
    store = Store(tmp_path / "store")
    served_memory = ServedMemory(agent, None, memory)
    recorder = Recorder(store, agent, served_memory.env, {"agent": "test"})
    served = ServedModels("v3", model, build, **{"lora_root": tmp_path, **models})
    server = Server(agent, served, served_memory, recorder, config or ServeConfig(), api_keys)
    return server, model, store


def serving_client(tmp_path, **options):
    """``(http, model, store)``: a TestClient of :func:`make_server`'s app."""
    from fastapi.testclient import TestClient

    from ratchet.serve.app import create_app

    server, model, store = make_server(tmp_path, **options)
    return TestClient(create_app(server)), model, store


def client_for(http, key="unused"):
    """The official openai client over a TestClient."""
    import openai

    return openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=http)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ratchet() -> str:
    return shutil.which("ratchet") or str(Path(sys.executable).parent / "ratchet")


def wait_for(url: str, server: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, "ratchet serve exited"
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(1)
    raise AssertionError(f"{url} did not answer in {seconds} s")
