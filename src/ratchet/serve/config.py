"""Settings of ``ratchet serve``: one declaration, used by the library and the CLI."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeConfig:
    """How an agent is served.

    Attributes:
        name: The model id clients ask for (default: the agent's version).
        host: Interface to listen on.
        port: Port to listen on.
        store: Store directory that records every conversation.
        env: Env whose exemplars are retrieved for incoming conversations and recorded as
            theirs (default: the env most of the agent's exemplars come from).
        memory: Apply the agent's memory (system prompt, insights, exemplars) to incoming
            conversations (off: the bare model is served, as vLLM would).
        max_tokens: Reply cap when a request sets none.
        api_key_env: Environment variable holding the comma-separated API keys that clients
            send as 'Authorization: Bearer KEY' (unset: no key needed).
        max_body_mb: Largest request body accepted, in MiB (a larger one gets 413 unread).
        lora_root: Directory that /v1/load_lora_adapter may load adapters from (unset:
            loading adapters at run time is off).
        max_loras: Most adapters loaded beside the served model at once.
    """

    name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    store: str = "runs/serve"
    env: str | None = None
    memory: bool = True
    max_tokens: int = 256
    api_key_env: str | None = None
    max_body_mb: float = 16.0
    lora_root: str | None = None
    max_loras: int = 4

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"--port must be in 1..65535; got {self.port}")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be at least 1; got {self.max_tokens}")
        if not self.max_body_mb > 0:
            raise ValueError(f"--max-body-mb must be positive; got {self.max_body_mb}")
        if self.max_loras < 0:
            raise ValueError(f"--max-loras must be at least 0; got {self.max_loras}")

    @property
    def max_body_bytes(self) -> int:
        """The body cap in bytes."""
        return int(self.max_body_mb * 2**20)
