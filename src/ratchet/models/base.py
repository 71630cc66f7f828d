"""The model protocol every backend implements, and ``make_model`` to pick one by name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ratchet.tool import ToolCall


class ModelError(RuntimeError):
    """A backend could not be reached or set up (unreachable server, missing model file)."""


@dataclass(frozen=True)
class Prompt:
    """One conversation to continue.

    Attributes:
        messages: OpenAI chat-format messages (system, user, assistant, tool).
        tools: OpenAI-format tool schemas on offer; the reply should call one of them.
    """

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Sampling:
    """How to sample a reply.

    Attributes:
        temperature: 0 means greedy.
        max_tokens: Cap on generated tokens per reply.
        seed: Base seed for reproducible sampling where the backend supports it.
    """

    temperature: float = 0.7
    max_tokens: int = 256
    seed: int | None = None


@dataclass(frozen=True)
class Completion:
    """One reply.

    Attributes:
        text: The assistant's raw text (for constrained local decoding, the JSON tool call).
        tool_calls: Tool calls the backend parsed natively (OpenAI ``tool_calls``), if any.
        prompt_tokens: Tokens read.
        completion_tokens: Tokens generated.
        latency_s: Seconds the backend spent on this reply (shared batch time for batches).
        error: Set when this one request failed (after retries); the text is then empty.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Model(Protocol):
    """A backend that completes a batch of conversations."""

    name: str

    def complete(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        """Return one completion per prompt, in order.

        A failure of one request is reported in that completion's ``error``; a backend that
        cannot work at all (unreachable, misconfigured) raises :class:`ModelError`.
        """
        ...


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
        from ratchet.models.local import LocalModel

        return LocalModel(target or None, **options)
    if kind == "openai":
        if not target:
            raise ValueError("openai models need a name: --model openai:NAME")
        from ratchet.models.openai import OpenAIModel

        return OpenAIModel(target, **options)
    if kind == "fake":
        from ratchet.models.fake import FakeModel

        return FakeModel(**options)
    raise ValueError(f"unknown model {spec!r}; use local, local:PATH, openai:NAME or fake")
