"""A scripted model for tests: replies come from a list, a callable, or a default."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ratchet.models.base import Completion, Prompt, Sampling

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
    """

    reply: Reply = always_finish
    script: Sequence[str] = ()
    name: str = "fake"
    calls: int = 0
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def complete(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        """Return the next scripted reply for each prompt."""
        completions = []
        for prompt in prompts:
            if self.script:
                text = self.script[self.calls % len(self.script)]
            else:
                text = self.reply(prompt, self._rng)
            self.calls += 1
            completions.append(
                Completion(text, prompt_tokens=_count(prompt), completion_tokens=len(text.split()))
            )
        return completions


def _count(prompt: Prompt) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in prompt.messages)
