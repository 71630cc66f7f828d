"""Model backends: ``local`` (transformers), ``openai`` (any compatible server), ``fake`` (tests).

All implement :class:`~ratchet.engine.models.base.Model`: complete a batch of conversations that
offer tools. Backends whose weights Ratchet can train also offer a
:class:`~ratchet.engine.models.base.Trainer` (see :func:`make_trainer`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ratchet.core.agent import Agent
from ratchet.engine.models.base import (
    BatchedModel,
    Completion,
    LoraSettings,
    Model,
    ModelError,
    Preference,
    Prompt,
    Sampling,
    Scored,
    Trainer,
    TrainResult,
    WindowedModel,
)

__all__ = [
    "Backends",
    "BatchedModel",
    "Completion",
    "LoraSettings",
    "Model",
    "ModelError",
    "Preference",
    "Prompt",
    "Sampling",
    "Scored",
    "TrainResult",
    "Trainer",
    "WindowedModel",
    "cached_backends",
    "make_model",
    "make_trainer",
]


def make_model(spec: str, **options: Any) -> Model:
    """Build a backend from a reference such as ``local``, ``local:PATH``, ``openai:NAME``.

    Args:
        spec: ``local`` (the embedded SmolLM2-135M), ``local:PATH`` (a Hugging Face model
            directory or a GGUF file), ``openai:NAME`` (a model on an OpenAI-compatible
            server), or ``fake`` (a scripted model that always finishes; for tests).
        **options: Backend options, e.g. ``base_url`` for ``openai``, ``adapter`` for ``local``.

    Raises:
        ValueError: If the reference names no known backend.
    """
    kind, _, target = spec.partition(":")
    if kind == "local":
        from ratchet.engine.models.local import LocalModel

        return LocalModel(target or None, **options)
    if kind == "openai":
        if not target:
            raise ValueError("openai models need a name: --model openai:NAME")
        return _served(target, **options)
    if kind == "fake":
        from ratchet.engine.models.fake import FakeModel

        return FakeModel(**options)
    raise ValueError(f"unknown model {spec!r}; use local, local:PATH, openai:NAME or fake")


def _served(
    name: str, base_url: str | None = None, adapter: str | None = None, **options: Any
) -> Model:
    """An ``openai`` model: on one server, or routed over several (comma-separated URLs).

    With ``adapter``, the adapter is first registered on every server (dynamic LoRA) and the
    model served under the adapter's name is used.
    """
    from ratchet.engine.models.openai import OpenAIModel

    urls = [url.strip() for url in (base_url or "").split(",") if url.strip()]
    if adapter is not None:
        from ratchet.engine.models.served import register_adapter

        if not urls:
            raise ValueError("an adapter for an openai model needs the server: --base-url URL")
        name = register_adapter(urls, Path(adapter), options.get("api_key_env", "OPENAI_API_KEY"))
    if len(urls) <= 1:
        return OpenAIModel(name, base_url=urls[0] if urls else None, **options)
    from ratchet.engine.models.routed import RoutedModel

    return RoutedModel([OpenAIModel(name, base_url=url, **options) for url in urls])


def make_trainer(spec: str, weights: str | None = None, base_url: str | None = None) -> Trainer:
    """Return the adapter trainer for a model reference.

    Args:
        spec: ``local``, ``local:PATH``, or ``openai:NAME`` with ``weights``.
        weights: For a served model, its Hugging Face weights (adapters are trained from them
            here and registered on the server).
        base_url: For a served model, its server (the first, if several).

    Raises:
        ValueError: If the model's weights cannot be trained here.
    """
    kind, _, target = spec.partition(":")
    if kind == "openai" and weights is not None:
        from ratchet.engine.models.served import ServedTrainer

        server = (base_url or os.environ.get("OPENAI_BASE_URL") or "").split(",")[0].strip()
        if not server:
            raise ValueError("training adapters for a served model needs its --base-url")
        return ServedTrainer(target, weights, server)
    if kind != "local":
        raise ValueError(
            f"weight levers train local models, or served ones given their weights; for "
            f"{spec!r} pass --weights PATH (its Hugging Face weights) or use --model local"
        )
    from ratchet.engine.models.training import LocalTrainer

    return LocalTrainer(target or None)


Backends = Callable[[Agent, Path | None], Model]
"""``backends(agent, agent_dir) -> Model``: the backend that plays an agent version."""


def cached_backends(build: Callable[[str, Path | None], Model] | None = None) -> Backends:
    """Return :data:`Backends` that build each (model, adapter) backend once and reuse it.

    Args:
        build: ``build(model_reference, adapter_path)``; default :func:`make_model`.
    """

    def default(spec: str, adapter: Path | None) -> Model:
        return make_model(spec, **({"adapter": str(adapter)} if adapter else {}))

    made: dict[tuple[str, Path | None], Model] = {}

    def backend(agent: Agent, directory: Path | None) -> Model:
        key = (agent.model, agent.adapter_path(directory))
        if key not in made:
            made[key] = (build or default)(*key)
        return made[key]

    return backend
