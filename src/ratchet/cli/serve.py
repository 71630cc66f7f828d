"""``ratchet serve``: an agent version as an OpenAI-compatible server that records its traffic."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ratchet.cli.options import (
    BaseUrl,
    Threads,
    build_config,
    config_options,
    console,
    fail,
    load_model,
    with_options,
)
from ratchet.core.agent import Agent, load_agent
from ratchet.engine.models import Model, make_model
from ratchet.engine.store import Store
from ratchet.serve.config import ServeConfig

if TYPE_CHECKING:
    from ratchet.serve.models import BuildAdapter


@with_options(config_options(ServeConfig))
def serve(
    agent_ref: Annotated[
        str, typer.Argument(metavar="AGENT_DIR", help="An agent directory, or base.")
    ],
    options: dict[str, Any],
    model: Annotated[
        str | None,
        typer.Option(help="local, local:PATH, openai:NAME or fake (default: the agent's own)."),
    ] = None,
    base_url: BaseUrl = None,
    threads: Threads = None,
) -> None:
    """Serve an agent as an OpenAI-compatible model; record every conversation.

    Routes: /v1/models and /v1/models/ID, /v1/chat/completions (tools, streaming, response_format,
    logprobs), /v1/feedback (a verdict on a recorded conversation), /v1/load_lora_adapter and
    /v1/unload_lora_adapter (as vLLM, with --lora-root), /metrics, and /health (no key).
    """
    try:
        import uvicorn

        from ratchet.serve.app import Server, Uvicorn, create_app
        from ratchet.serve.conversations import ServedMemory
        from ratchet.serve.models import ServedModels
        from ratchet.serve.recorder import Recorder
    except ImportError as exc:
        fail(
            f"ratchet serve needs the serve extra ({exc.name} is missing): "
            "pip install ratchet[serve]"
        )
    config = build_config(ServeConfig, options)
    agent, directory = _agent(agent_ref, model)
    api_keys = _api_keys(config.api_key_env)
    backend = load_model(agent.model, base_url, agent.adapter_path(directory), threads)
    name = config.name or agent.version
    memory = ServedMemory(agent, config.env, config.memory)
    store = Store(config.store)
    settings = {"agent": agent_ref, "version": agent.version, "model": agent.model, "name": name}
    recorder = Recorder(store, agent, memory.env, settings)
    lora_root = Path(config.lora_root) if config.lora_root else None
    build = _adapter_builder(agent, threads)
    models = ServedModels(name, backend, build, lora_root, config.max_loras)
    server = Server(agent, models, memory, recorder, config, api_keys)
    app = create_app(server)
    url = f"http://{config.host}:{config.port}/v1"
    console.print(
        f"serving {name!r} ({agent.model}) at {url}; recording conversations in {store.root}",
        highlight=False,
    )
    listening = uvicorn.Config(app, host=config.host, port=config.port, log_level="warning")
    try:
        Uvicorn(listening, server).run()
    finally:
        store.close()


def _agent(reference: str, model: str | None) -> tuple[Agent, Path | None]:
    try:
        agent, directory = load_agent(reference, model or "local")
    except ValueError as exc:
        fail(str(exc))
    if agent.scripted:
        fail(f"{reference} is a scripted agent; serve an agent directory or base")
    return (replace(agent, model=model) if model else agent), directory


def _api_keys(variable: str | None) -> tuple[str, ...]:
    """The keys in ``variable`` (comma-separated); none without a variable."""
    if variable is None:
        return ()
    keys = tuple(key.strip() for key in os.environ.get(variable, "").split(",") if key.strip())
    if not keys:
        fail(f"--api-key-env names {variable}, which is not set (or empty)")
    return keys


def _adapter_builder(agent: Agent, threads: int | None) -> BuildAdapter | None:
    """Adapters load into local models; a proxied server loads its own (``None``)."""
    if not agent.model.startswith("local"):
        return None

    def build(adapter: Path) -> Model:
        return make_model(
            agent.model, adapter=str(adapter), **({"threads": threads} if threads else {})
        )

    return build
