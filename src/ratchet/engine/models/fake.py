"""A scripted model for tests: replies come from a list, a callable, or a default."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
    """

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
                completions.append(Completion("", error=message))
                continue
            completions.append(
                Completion(text, prompt_tokens=tokens, completion_tokens=len(text.split()))
            )
        return completions

    def count_tokens(self, prompt: Prompt) -> int:
        """Return the prompt's length in words (what ``prompt_tokens`` reports)."""
        return _count(prompt)


def _count(prompt: Prompt) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in prompt.messages)
