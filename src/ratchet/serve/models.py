"""The models one server offers: the agent's own, and LoRA adapters loaded at run time.

Each served model has its backend and, for a local model, a
:class:`~ratchet.engine.batching.Batcher` that gathers the requests being handled at the same
moment into one batched call, as rollouts do for concurrent episodes. Adapters are loaded and
unloaded through vLLM's dynamic-LoRA endpoints, so a trainer that registers candidates with
vLLM registers them here the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet.engine.batching import Batcher
from ratchet.engine.models.base import BatchedModel, Completion, Model, Prompt, Sampling
from ratchet.serve.protocol import ApiError

BuildAdapter = Callable[[Path], Model]
"""``build(adapter_dir) -> Model``: the agent's model with a LoRA adapter applied."""

PROMPT_FORMAT = "ratchet"
"""How a local model reads prompts (:mod:`ratchet.engine.models.render`); trainers match it."""


@dataclass
class Served:
    """One model id and the backend behind it.

    Attributes:
        name: The id clients ask for.
        model: The backend.
        adapter: The adapter directory, for adapters loaded at run time.
        created: When it was loaded (Unix time).
        active: Requests being answered right now.
    """

    name: str
    model: Model
    adapter: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    active: int = 0
    batcher: Batcher | None = None

    def __post_init__(self) -> None:
        if isinstance(self.model, BatchedModel):
            self.batcher = Batcher(self.model, self.model.max_batch_size)


class ServedModels:
    """The base model and the adapters loaded beside it.

    Args:
        name: The base model's id.
        model: Its backend.
        build: Builds the backend for an adapter (``None``: adapters cannot be loaded).
    """

    def __init__(self, name: str, model: Model, build: BuildAdapter | None = None) -> None:
        self.base = Served(name, model)
        self.build = build
        self._adapters: dict[str, Served] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Served:
        """The served model called ``name``.

        Raises:
            ApiError: 404 naming the models on offer.
        """
        if name == self.base.name:
            return self.base
        with self._lock:
            served = self._adapters.get(name)
        if served is None:
            known = ", ".join([self.base.name, *self._adapters])
            raise ApiError(
                404,
                f"the model {name!r} does not exist here; models: {known}",
                param="model",
                code="model_not_found",
            )
        return served

    def listing(self) -> list[dict[str, Any]]:
        """The ``/v1/models`` entries: the base model, then the adapters."""
        base = self.base
        entries = [_entry(base.name, base.created, base.model.name, None)]
        if isinstance(base.model, BatchedModel):
            entries[0]["prompt_format"] = PROMPT_FORMAT
        with self._lock:
            adapters = list(self._adapters.values())
        for served in adapters:
            entry = _entry(served.name, served.created, served.adapter, base.name)
            entry["prompt_format"] = entries[0].get("prompt_format")
            entries.append(entry)
        return entries

    def load(self, name: str, path: str, inplace: bool = False) -> None:
        """Load the adapter at ``path`` as model ``name``.

        Raises:
            ApiError: 400 if adapters cannot be loaded here, the name is taken (without
                ``inplace``) or the directory holds no adapter.
        """
        if self.build is None:
            raise ApiError(400, f"{self.base.model.name} takes no LoRA adapters here")
        if name == self.base.name:
            raise ApiError(400, f"{name!r} is the base model's name", param="lora_name")
        with self._lock:
            if name in self._adapters and not inplace:
                raise ApiError(
                    400, f"The lora adapter '{name}' has already been loaded.", param="lora_name"
                )
        directory = Path(path).expanduser()
        if not (directory / "adapter_config.json").is_file():
            raise ApiError(
                400, f"no LoRA adapter at {directory} (no adapter_config.json)", param="lora_path"
            )
        model = self.build(directory)
        with self._lock:
            self._adapters[name] = Served(name, model, adapter=str(directory))

    def unload(self, name: str) -> None:
        """Forget adapter ``name``.

        Raises:
            ApiError: 404 if no adapter of that name is loaded.
        """
        with self._lock:
            if self._adapters.pop(name, None) is None:
                raise ApiError(
                    404, f"The lora adapter '{name}' cannot be found.", param="lora_name"
                )

    def complete(self, served: Served, prompt: Prompt, sampling: Sampling) -> Completion:
        """One reply from ``served``, batched with the other requests in flight for it."""
        batcher = served.batcher
        if batcher is None:
            return served.model.complete([prompt], sampling)[0]
        with self._lock:
            served.active += 1
            batcher.in_flight(served.active)
        try:
            return batcher.complete(prompt, sampling)
        finally:
            with self._lock:
                served.active -= 1
                batcher.in_flight(served.active)


def _entry(name: str, created: int, root: str | None, parent: str | None) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "ratchet",
        "root": root,
        "parent": parent,
    }
