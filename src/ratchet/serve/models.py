"""The models one server offers: the agent's own, and LoRA adapters loaded at run time.

Each served model has its backend and, for a local model, a
:class:`~ratchet.engine.batching.Batcher` that gathers the requests being handled at the same
moment into one batched call, as rollouts do for concurrent episodes. Adapters are loaded and
unloaded through vLLM's dynamic-LoRA endpoints, so a trainer that registers candidates with
vLLM registers them here the same way. Loading is off unless the server names a directory that
adapters may come from (``--lora-root``), and at most ``--max-loras`` are loaded at once: each
is a copy of the model in memory.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet.engine.batching import Batcher
from ratchet.engine.cancel import Abandoned, never, watching
from ratchet.engine.models.base import BatchedModel, Completion, Model, ModelError, Prompt, Sampling
from ratchet.serve.protocol import ApiError
from ratchet.serve.replies import model_entry

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
        lora_root: The directory adapters may be loaded from (``None``: none may be).
        max_loras: Most adapters loaded at once.
    """

    def __init__(
        self,
        name: str,
        model: Model,
        build: BuildAdapter | None = None,
        lora_root: Path | None = None,
        max_loras: int = 4,
    ) -> None:
        self.base = Served(name, model)
        self.build = build
        self.lora_root = lora_root.resolve() if lora_root is not None else None
        self.max_loras = max_loras
        self._adapters: dict[str, Served] = {}
        self._loading: set[str] = set()
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
            raise self._missing(name)
        return served

    def _missing(self, name: str) -> ApiError:
        with self._lock:
            known = ", ".join([self.base.name, *self._adapters])
        return ApiError(
            404,
            f"the model {name!r} does not exist here; models: {known}",
            param="model",
            code="model_not_found",
        )

    def listing(self) -> list[dict[str, Any]]:
        """The ``/v1/models`` entries: the base model, then the adapters."""
        base = self.base
        prompt_format = PROMPT_FORMAT if isinstance(base.model, BatchedModel) else None
        entries = [model_entry(base.name, base.created, base.model.name, None, prompt_format)]
        with self._lock:
            adapters = list(self._adapters.values())
        for served in adapters:
            entries.append(
                model_entry(served.name, served.created, served.adapter, base.name, prompt_format)
            )
        return entries

    def entry(self, name: str) -> dict[str, Any]:
        """The ``/v1/models/{name}`` entry.

        Raises:
            ApiError: 404 naming the models on offer.
        """
        found = next((entry for entry in self.listing() if entry["id"] == name), None)
        if found is None:
            raise self._missing(name)
        return found

    def load(self, name: str, path: str, inplace: bool = False) -> None:
        """Load the adapter at ``path`` as model ``name``.

        Raises:
            ApiError: 400 if adapters cannot be loaded here, the name is taken (without
                ``inplace``), ``max_loras`` are loaded, the path is outside ``lora_root``, or
                the directory holds no readable adapter.
        """
        if self.build is None:
            raise ApiError(400, f"{self.base.model.name} takes no LoRA adapters here")
        if self.lora_root is None:
            raise ApiError(
                400,
                "loading adapters at run time is off: start ratchet serve with --lora-root DIR",
                param="lora_path",
            )
        if name == self.base.name:
            raise ApiError(400, f"{name!r} is the base model's name", param="lora_name")
        directory = self._adapter_dir(path)
        with self._lock:
            self._reserve(name, inplace)
        try:
            model = self.build(directory)
        except (ModelError, ValueError, OSError) as exc:
            raise ApiError(400, f"cannot load the adapter at {directory}: {exc}") from None
        finally:
            with self._lock:
                self._loading.discard(name)
        with self._lock:
            self._adapters[name] = Served(name, model, adapter=str(directory))

    def _adapter_dir(self, path: str) -> Path:
        """The adapter directory at ``path``, inside ``lora_root`` and with a usable config."""
        assert self.lora_root is not None
        directory = Path(path).expanduser().resolve()
        if not directory.is_relative_to(self.lora_root):
            raise ApiError(
                400, f"lora_path must be inside {self.lora_root} (--lora-root)", param="lora_path"
            )
        config = directory / "adapter_config.json"
        try:
            settings = json.loads(config.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            message = f"no LoRA adapter at {directory} (adapter_config.json: {exc})"
            raise ApiError(400, message, param="lora_path") from None
        if not isinstance(settings, dict):
            message = f"{config} must hold a JSON object, not {type(settings).__name__}"
            raise ApiError(400, message, param="lora_path")
        return directory

    def _reserve(self, name: str, inplace: bool) -> None:
        """Count ``name`` among the adapters while it loads (the lock is held)."""
        if name in self._loading or (name in self._adapters and not inplace):
            raise ApiError(
                400, f"The lora adapter '{name}' has already been loaded.", param="lora_name"
            )
        if len(self._adapters.keys() - {name}) + len(self._loading) >= self.max_loras:
            raise ApiError(
                400,
                f"{self.max_loras} adapters are loaded (--max-loras): unload one first",
                param="lora_name",
            )
        self._loading.add(name)

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

    def complete(
        self, served: Served, prompt: Prompt, sampling: Sampling, abandoned: Abandoned = never
    ) -> Completion:
        """One reply from ``served``, batched with the other requests in flight for it.

        ``abandoned`` tells whether the client has gone; generation stops then where the
        backend can stop it (see :mod:`ratchet.engine.cancel`).
        """
        batcher = served.batcher
        if batcher is None:
            with watching([abandoned]):
                return served.model.complete([prompt], sampling)[0]
        with self._lock:
            served.active += 1
            batcher.in_flight(served.active)
        try:
            return batcher.complete(prompt, sampling, abandoned)
        finally:
            with self._lock:
                served.active -= 1
                batcher.in_flight(served.active)
