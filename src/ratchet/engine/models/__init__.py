"""Model backends: ``local`` (transformers), ``openai`` (any compatible server), ``fake`` (tests).

All implement :class:`~ratchet.engine.models.base.Model`: complete a batch of conversations that
offer tools. Backends whose weights Ratchet can train also offer a
:class:`~ratchet.engine.models.base.Trainer` (see :func:`make_trainer`).
"""

from __future__ import annotations

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
        from ratchet.engine.models.openai import OpenAIModel

        return OpenAIModel(target, **options)
    if kind == "fake":
        from ratchet.engine.models.fake import FakeModel

        return FakeModel(**options)
    raise ValueError(f"unknown model {spec!r}; use local, local:PATH, openai:NAME or fake")


def make_trainer(spec: str) -> Trainer:
    """Return the adapter trainer for a model reference.

    Args:
        spec: ``local`` or ``local:PATH``.

    Raises:
        ValueError: If the model's weights cannot be trained here (a served model).
    """
    kind, _, target = spec.partition(":")
    if kind != "local":
        raise ValueError(
            f"weight levers train local models; {spec!r} is served elsewhere (use --model local)"
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
