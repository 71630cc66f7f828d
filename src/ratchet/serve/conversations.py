"""The agent's memory applied to incoming conversations, as the harness applies it in episodes.

In an episode the model reads the agent's system message (prompt plus learned insights, see
:func:`ratchet.engine.harness.system_message`), then demonstrations retrieved for the task
(:class:`ratchet.core.memory.ExemplarIndex`), then the conversation. A served conversation gets
the same: the agent's system message goes first (a system message the client sent is kept
after it, in the same message, since small chat templates expect one), and demonstrations are
retrieved for its first user message. Further kinds of memory (the skill library) plug in as
:data:`Augment` functions applied to the finished prompt.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.memory import ExemplarIndex, demonstration
from ratchet.core.served import SERVED_FAMILY, SERVED_KEY
from ratchet.core.served import is_served as is_served  # for the old ratchet.serve.memory
from ratchet.core.task import Task
from ratchet.engine.harness import system_message
from ratchet.engine.models.base import Prompt

Augment = Callable[[Agent, Prompt], Prompt]
"""``augment(agent, prompt) -> prompt``: one more part of memory applied to served prompts."""


def default_env(agent: Agent) -> str | None:
    """The env most of the agent's exemplars come from, or ``None`` without exemplars."""
    counts = Counter(exemplar.env for exemplar in agent.exemplars)
    return counts.most_common(1)[0][0] if counts else None


def content_text(message: dict[str, Any]) -> str:
    """A message's content as text: content parts joined, ``None`` as ``""``."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def first_user_text(messages: Sequence[dict[str, Any]]) -> str:
    """The text of the first user message (the task, for a tool-using agent), or ``""``."""
    return next((content_text(m) for m in messages if m.get("role") == "user"), "")


class ServedMemory:
    """Applies one agent's memory to the conversations a server receives.

    Args:
        agent: The served agent.
        env: The env whose exemplars apply (default: :func:`default_env`).
        enabled: ``False`` serves the bare model: conversations pass through unchanged.
        augments: Further memory applied to each prompt, in order (e.g. skills).
    """

    def __init__(
        self,
        agent: Agent,
        env: str | None = None,
        enabled: bool = True,
        augments: Sequence[Augment] = (),
    ) -> None:
        self.agent = agent
        self.env = env or default_env(agent)
        self.enabled = enabled
        self.augments = tuple(augments)
        self._index = ExemplarIndex(agent.exemplars) if enabled and agent.exemplars else None

    def conversation(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The conversation as the agent has it: its system message first, then the client's."""
        if not self.enabled:
            return list(messages)
        system = str(system_message(self.agent)["content"])
        rest = list(messages)
        if rest and rest[0].get("role") == "system":
            own = content_text(rest.pop(0))
            system = f"{system}\n\n{own}" if own else system
        return [{"role": "system", "content": system}, *rest]

    def prompt(
        self, conversation: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> Prompt:
        """The prompt the model reads: demonstrations after the system message, then the rest."""
        context: list[dict[str, Any]] = []
        if self._index is not None and self.env is not None and conversation:
            task = Task(
                id="",
                env=self.env,
                instruction=first_user_text(conversation),
                split="train",
                problem=SERVED_KEY,  # no exemplar's key: none is taken for the task itself
                family=SERVED_FAMILY,
            )
            exemplars = self._index.select(
                task, self.agent.exemplars_per_task, self.agent.exemplar_token_budget
            )
            context = [turn for exemplar in exemplars for turn in demonstration(exemplar)]
        head, tail = tuple(conversation[:1]), tuple(conversation[1:])
        prompt = Prompt((*head, *context, *tail), tuple(tools))
        for augment in self.augments:
            prompt = augment(self.agent, prompt)
        return prompt
