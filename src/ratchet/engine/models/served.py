"""Adapters for served models: register them on the server, train them from the weights.

A model served elsewhere (vLLM, SGLang, ``ratchet serve``) is improved by training a LoRA
adapter locally from the same Hugging Face weights (``--weights PATH``; on a GPU when torch sees
one) and then registering it on the server through vLLM's dynamic-LoRA endpoint
``POST /v1/load_lora_adapter``, after which the server serves it under its own model name.
vLLM needs ``--enable-lora`` (with ``--max-lora-rank`` at least the adapter's rank) and the
environment variable ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; the adapter directory must be
readable by the server at the same path (same machine or a shared filesystem).

An adapter is registered under a name derived from its files' content, so registering the same
adapter twice (or on several servers) is harmless, and a changed adapter never reuses a name.

Training renders each episode the way the server will prompt the model: ``ratchet serve`` with
a local model says so in ``/v1/models`` (``"prompt_format": "ratchet"``: tools in the system
message, JSON calls as text); any other server applies the model's own chat template with
native tools, and so does training.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from rich.progress import Progress

from ratchet.core.trajectory import Trajectory
from ratchet.engine.models.base import LoraSettings, ModelError, Preference, Scored, TrainResult
from ratchet.engine.models.render import render_native, render_prompt

if TYPE_CHECKING:
    from ratchet.engine.models.training import LocalTrainer

_TIMEOUT_S = 300.0  # a server may load the adapter's weights before it answers


def adapter_name(adapter: Path) -> str:
    """The name an adapter is served under: its directory's name and a digest of its files."""
    digest = hashlib.sha256()
    for file in sorted(p for p in adapter.iterdir() if p.is_file()):
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return f"ratchet-{adapter.resolve().parent.name}-{digest.hexdigest()[:10]}"


def register_adapter(
    base_urls: Sequence[str], adapter: Path, api_key_env: str = "OPENAI_API_KEY"
) -> str:
    """Load ``adapter`` on every server and return the model name it is served under.

    Raises:
        ModelError: If the directory holds no adapter, or a server refuses or cannot be reached
            (the message says how to enable dynamic LoRA on vLLM).
    """
    if not (adapter / "adapter_config.json").is_file():
        raise ModelError(f"no LoRA adapter at {adapter}: expected adapter_config.json in it")
    name = adapter_name(adapter)
    body = {"lora_name": name, "lora_path": str(adapter.resolve())}
    for base_url in base_urls:
        url = f"{base_url.rstrip('/')}/load_lora_adapter"
        try:
            reply = httpx.post(url, json=body, headers=_headers(api_key_env), timeout=_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise ModelError(f"cannot register the adapter at {url}: {exc}") from None
        if reply.status_code == 200 or "already" in reply.text:
            continue
        hint = ""
        if reply.status_code in (404, 405):
            hint = (
                " (the server has no dynamic-LoRA endpoint: start vLLM with --enable-lora and "
                "the environment variable VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
            )
        raise ModelError(
            f"{url} refused the adapter {adapter}: HTTP {reply.status_code} "
            f"{reply.text[:300]}{hint}"
        )
    return name


class ServedTrainer:
    """Trains adapters for a served model from its Hugging Face weights.

    Args:
        name: The model's name on the server.
        weights: The model's Hugging Face weights (a local directory or GGUF file).
        base_url: The server, asked once how it renders prompts.
        api_key_env: Environment variable holding the server's API key.
    """

    def __init__(
        self, name: str, weights: str, base_url: str, api_key_env: str = "OPENAI_API_KEY"
    ) -> None:
        self.name = name
        self.weights = weights
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env

    def prompt_format(self) -> str:
        """``ratchet`` if the server renders prompts as ``ratchet serve`` does, else ``native``.

        Raises:
            ModelError: If the server cannot be asked.
        """
        url = f"{self.base_url}/models"
        try:
            reply = httpx.get(url, headers=_headers(self.api_key_env), timeout=30.0)
            reply.raise_for_status()
            entries = reply.json()["data"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"cannot ask {url} how it prompts {self.name!r}: {exc}") from None
        for entry in entries:
            if isinstance(entry, dict) and entry.get("id") == self.name:
                return "ratchet" if entry.get("prompt_format") == "ratchet" else "native"
        raise ModelError(f"{url} does not serve {self.name!r}; check --model and --base-url")

    def sft(
        self,
        episodes: Sequence[Trajectory],
        out: Path,
        settings: LoraSettings,
        progress: Progress | None = None,
    ) -> TrainResult | None:
        """Fine-tune an adapter on ``episodes`` from the weights, rendered as the server does."""
        return self._local().sft(episodes, out, settings, progress)

    def dpo(
        self,
        pairs: Sequence[Preference],
        out: Path,
        settings: LoraSettings,
        start: Path | None = None,
        progress: Progress | None = None,
        anchors: Sequence[Trajectory] = (),
    ) -> TrainResult | None:
        """Train on preference pairs from the weights, rendered as the server does."""
        return self._local().dpo(pairs, out, settings, start, progress, anchors)

    def grpo(
        self,
        episodes: Sequence[Scored],
        out: Path,
        settings: LoraSettings,
        start: Path | None = None,
        progress: Progress | None = None,
    ) -> TrainResult | None:
        """Reinforce episodes by their advantages from the weights, rendered as the server does."""
        return self._local().grpo(episodes, out, settings, start, progress)

    def _local(self) -> LocalTrainer:
        from ratchet.engine.models.training import LocalTrainer

        render = render_prompt if self.prompt_format() == "ratchet" else render_native
        return LocalTrainer(self.weights, render)


def _headers(api_key_env: str) -> dict[str, str]:
    key = os.environ.get(api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}
