"""The context policy: what an episode's prompt leaves out once it outgrows the model's window.

Every turn adds the model's call and the tool's result to the conversation, so a long episode
eventually asks for more tokens than the model can read (and a backend would then fail, or cut
the prompt where it likes). Before each model call the harness passes the conversation through
:meth:`Context.fit`, which applies the declared :class:`ContextPolicy` until the prompt and the
reply's tokens fit the window:

1. the results of turns older than the last ``keep_turns`` are elided, oldest first (each
   becomes a one-line stub saying how long it was);
2. the demonstrations (retrieved exemplars) are dropped;
3. whole turns are dropped, oldest first, down to the last one; a note after the task says how
   many were left out.

The system message and the task are always kept. If even they and the last turn do not fit,
:meth:`Context.fit` returns no prompt and the harness ends the episode as truncated: a prompt
the model cannot take is never sent. The trajectory keeps the full conversation; what was cut,
at which turn, is recorded in its ``metadata["context"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ratchet.engine.models.base import Prompt

Message = dict[str, Any]

ELIDED = "[result elided to fit the context window: it was {chars} characters]"
OMITTED = "[{turns} earlier turn(s) omitted to fit the context window]"


@dataclass(frozen=True)
class ContextPolicy:
    """How an episode's prompt is cut down when it outgrows the model's context window.

    Attributes:
        keep_turns: Most recent turns whose tool results are never elided (older turns may be
            dropped whole if eliding is not enough).
    """

    keep_turns: int = 4

    def __post_init__(self) -> None:
        if self.keep_turns < 0:
            raise ValueError(f"keep_turns must be at least 0, got {self.keep_turns}")


@dataclass(frozen=True)
class Fitted:
    """A prompt cut to fit, and what was cut.

    Attributes:
        prompt: The prompt to send; ``None`` when even the smallest one does not fit.
        trim: What the policy did (empty when the whole conversation fitted): ``tokens``
            before, ``fitted`` after, ``elided`` results, ``omitted`` turns, ``demonstrations``
            dropped (messages).
    """

    prompt: Prompt | None
    trim: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """A model's context window and the policy that keeps prompts inside it.

    Attributes:
        window: Tokens the model can attend to, prompt and reply together.
        reply_tokens: Tokens kept free for the reply.
        count: ``count(prompt) -> tokens`` the model reads for a prompt.
        policy: What to leave out first.
    """

    window: int
    reply_tokens: int
    count: Callable[[Prompt], int]
    policy: ContextPolicy = field(default_factory=ContextPolicy)

    def fit(
        self,
        system: Message,
        demonstrations: Sequence[Message],
        conversation: Sequence[Message],
        tools: tuple[dict[str, Any], ...],
    ) -> Fitted:
        """Return the prompt for ``conversation`` (the task, then the turns) cut to fit.

        Args:
            system: The system message.
            demonstrations: Messages of earlier example conversations, shown before the task.
            conversation: The task message, then each turn's call and result messages.
            tools: The tools on offer.
        """
        limit = self.window - self.reply_tokens
        task, turns = conversation[0], _turns(conversation[1:])
        demos, omitted, elided = list(demonstrations), 0, 0

        def prompt() -> Prompt:
            note = [{"role": "user", "content": OMITTED.format(turns=omitted)}] if omitted else []
            flat = [message for turn in turns for message in turn]
            return Prompt((system, *demos, task, *note, *flat), tools)

        tokens = before = self.count(prompt())
        if tokens <= limit:
            return Fitted(prompt())
        for index in range(len(turns) - self.policy.keep_turns):
            if tokens <= limit:
                break
            turns[index], changed = _elide(turns[index])
            elided += changed
            tokens = self.count(prompt()) if changed else tokens
        dropped = len(demos) if tokens > limit else 0
        if dropped:
            demos = []
            tokens = self.count(prompt())
        while tokens > limit and len(turns) > 1:
            turns.pop(0)
            omitted += 1
            tokens = self.count(prompt())
        trim = {"tokens": before, "fitted": tokens, "elided": elided, "omitted": omitted}
        trim["demonstrations"] = dropped
        return Fitted(prompt() if tokens <= limit else None, trim)


def _turns(messages: Sequence[Message]) -> list[list[Message]]:
    """Group the messages after the task into turns: a call and its result."""
    return [list(messages[i : i + 2]) for i in range(0, len(messages), 2)]


def _elide(turn: list[Message]) -> tuple[list[Message], bool]:
    """Replace a turn's result with a stub, unless the stub would be no shorter."""
    if len(turn) < 2:
        return turn, False
    text = str(turn[1].get("content") or "")
    stub = ELIDED.format(chars=len(text))
    if len(stub) >= len(text):
        return turn, False
    return [turn[0], {**turn[1], "content": stub}], True
