"""A scripted model for tests: replies come from a list, a callable, or a default."""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import jsonschema

import ratchet.engine.models.metadata as keys
from ratchet.engine.models.base import Completion, Prompt, Sampling

Reply = Callable[[Prompt, random.Random], str]


def always_finish(prompt: Prompt, rng: random.Random) -> str:
    """Reply with a ``finish`` call whose answer is empty (the null policy)."""
    return json.dumps({"name": "finish", "arguments": {"answer": ""}})


@dataclass
class FakeModel:
    """A model whose replies are scripted.

    Attributes:
        reply: ``reply(prompt, rng) -> text``; the default always calls ``finish("")``.
        script: If given, replies are taken from it in order (cycling), before ``reply``.
        name: The model reference recorded on trajectories.
        calls: How many prompts have been completed (for assertions in tests).
        context_window: A window to declare (tokens counted as words), or ``None``.
        sampling_options: The optional :class:`Sampling` fields it honours, as a scripted
            double: a reply that does not match ``reply_schema`` is replaced by the schema's
            simplest instance (see :func:`simplest_instance`), and each word is a token of
            log-probability 0 (the script is certain); ``top_p`` changes nothing.
    """

    sampling_options: ClassVar[frozenset[str]] = frozenset(
        {"top_p", "top_logprobs", "reply_schema"}
    )

    reply: Reply = always_finish
    script: Sequence[str] = ()
    name: str = "fake"
    calls: int = 0
    seed: int = 0
    context_window: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def complete(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        """Return the next scripted reply for each prompt.

        ``reply`` gets a random generator seeded by the model's seed, the prompt's seed (else
        the sampling seed) and the prompt, so an episode's replies do not depend on what other
        episodes run beside it.
        """
        completions = []
        for prompt in prompts:
            with self._lock:
                calls, self.calls = self.calls, self.calls + 1
            if self.script:
                text = self.script[calls % len(self.script)]
            else:
                fingerprint = json.dumps(prompt.messages, sort_keys=True, default=str)
                own = sampling.seed if prompt.seed is None else prompt.seed
                rng = random.Random(f"{self.seed}:{own}:{fingerprint}")
                text = self.reply(prompt, rng)
            tokens = _count(prompt)
            if (
                self.context_window is not None
                and tokens + sampling.max_tokens > self.context_window
            ):
                message = f"{tokens} prompt tokens + {sampling.max_tokens} exceed the window"
                completions.append(Completion("", error=message, metadata={keys.REFUSED: True}))
                continue
            if sampling.reply_schema is not None and not prompt.tools:
                text = _conforming(text, sampling.reply_schema)
            words = re.findall(r"\s*\S+", text)
            logprobs = [
                {"token": word, "logprob": 0.0, "bytes": list(word.encode()), "top_logprobs": []}
                for word in words
            ]
            if sampling.top_logprobs:
                for entry in logprobs:
                    entry["top_logprobs"] = [{k: entry[k] for k in ("token", "logprob", "bytes")}]
            completions.append(
                Completion(
                    text,
                    prompt_tokens=tokens,
                    completion_tokens=len(words),
                    metadata={keys.LOGPROBS: logprobs},
                )
            )
        return completions

    def count_tokens(self, prompt: Prompt) -> int:
        """Return the prompt's length in words (what ``prompt_tokens`` reports)."""
        return _count(prompt)


def _count(prompt: Prompt) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in prompt.messages)


def simplest_instance(schema: Any) -> Any:
    """The simplest value matching ``schema``, for the schemas tests use (no ``$ref``).

    Required properties only, the first of ``enum``, ``anyOf`` and type lists, the shortest
    strings and arrays allowed, numbers at their minimum (else 0).
    """
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return simplest_instance(schema[key][0])
    kind = schema.get("type", "object" if "properties" in schema else None)
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    if kind == "object":
        properties = schema.get("properties") or {}
        return {
            name: simplest_instance(properties.get(name)) for name in schema.get("required", [])
        }
    if kind == "array":
        return [simplest_instance(schema.get("items"))] * int(schema.get("minItems", 0))
    if kind == "string":
        return "a" * int(schema.get("minLength", 0))
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return {} if kind is None else None


def _conforming(text: str, schema: dict[str, Any]) -> str:
    """``text`` if it is JSON matching ``schema``, else the schema's simplest instance."""
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError):
        return json.dumps(simplest_instance(schema))
    return text
