"""Agents: the thing that improves, saved as a versioned directory with its lineage.

An agent directory holds ``agent.json`` (this module's :class:`Agent`) and any artifacts a lever
wrote beside it, such as a LoRA ``adapter/`` folder. Built-in agents need no directory:
``base`` (the default system prompt on a model), ``oracle`` (the env's own solution) and
``null`` (finishes at once with an empty answer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ratchet.core.memory import Exemplar, Insight, Skill
from ratchet.core.serialise import RecordError, from_dict, to_dict

AGENT_FILE = "agent.json"
SCRIPTED_AGENTS = ("oracle", "null")

DEFAULT_SYSTEM_PROMPT = (
    "You solve tasks by calling tools. Each reply is exactly one tool call. "
    "Read each tool result, then make the next call. "
    "When the task is done, call finish with the final answer."
)


@dataclass(frozen=True)
class Agent:
    """Everything that defines how an agent acts, apart from the env.

    Attributes:
        version: Version id, e.g. ``"base"`` or ``"v3"``.
        model: Model reference (``local``, ``local:PATH``, ``openai:NAME``, ``fake``).
        system_prompt: Instructions at the top of every conversation.
        guidance: Instructions per env name, added to the system prompt in that env's episodes.
        insights: Rules learned from experience, listed in the system prompt.
        exemplars: Demonstrations to retrieve from, per task.
        exemplars_per_task: How many demonstrations to show per task.
        exemplar_token_budget: Rough cap on the tokens all demonstrations of a task may take.
        skills: Tool-call procedures offered as extra tools (data, run by the harness).
        skills_per_task: How many skills to offer per task (the most relevant).
        adapter: LoRA adapter directory, relative to the agent directory (or absolute).
        temperature: Sampling temperature.
        max_turns: Turn budget per episode.
        parent: The version this one was derived from.
        lever: The lever that produced it.
        notes: Free-form provenance (gate numbers, trajectory ids learned from).
    """

    version: str = "base"
    model: str = "local"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    guidance: dict[str, str] = field(default_factory=dict)
    insights: tuple[Insight, ...] = ()
    exemplars: tuple[Exemplar, ...] = ()
    exemplars_per_task: int = 2
    exemplar_token_budget: int = 800
    skills: tuple[Skill, ...] = ()
    skills_per_task: int = 4
    adapter: str | None = None
    temperature: float = 0.7
    max_turns: int = 8
    parent: str | None = None
    lever: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def scripted(self) -> bool:
        """Whether this is a built-in scripted policy (``oracle`` or ``null``), not a model."""
        return self.version in SCRIPTED_AGENTS

    def derive(self, version: str, lever: str, **changes: Any) -> Agent:
        """Return a child version with ``changes`` applied and the lineage recorded."""
        return replace(self, version=version, parent=self.version, lever=lever, **changes)

    def save(self, directory: Path) -> Path:
        """Write ``agent.json`` into ``directory`` (created if needed) and return the directory."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / AGENT_FILE).write_text(json.dumps(to_dict(self), indent=2) + "\n")
        return directory

    def adapter_path(self, directory: Path | None) -> Path | None:
        """Resolve :attr:`adapter` against the agent directory it was loaded from."""
        if self.adapter is None:
            return None
        path = Path(self.adapter)
        return path if path.is_absolute() or directory is None else directory / path


def load_agent(reference: str, model: str = "local") -> tuple[Agent, Path | None]:
    """Resolve ``base``, ``oracle``, ``null`` or an agent directory to an agent.

    Args:
        reference: A built-in agent name or a path to an agent directory.
        model: The model reference for built-in agents (directories record their own).

    Returns:
        The agent and the directory it was loaded from (``None`` for built-ins).

    Raises:
        ValueError: If ``reference`` is neither a built-in name nor a readable agent directory.
    """
    if reference == "base" or reference in SCRIPTED_AGENTS:
        return Agent(version=reference, model=model), None
    directory = Path(reference)
    file = directory / AGENT_FILE
    if not file.is_file():
        raise ValueError(
            f"agent {reference!r} is not base, oracle, null or a directory with {AGENT_FILE}"
        )
    try:
        return from_dict(Agent, json.loads(file.read_text())), directory
    except (json.JSONDecodeError, RecordError, OSError) as exc:
        raise ValueError(f"{file} is not a valid agent file: {exc}") from exc
