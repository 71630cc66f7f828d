"""Observations, steps and trajectories: everything one episode produced.

Messages travel in the OpenAI chat format; :func:`assistant_message` and :func:`tool_message`
are the one place that builds them, so live episodes, replays and exports read alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict


@dataclass(frozen=True)
class Observation:
    """What the agent sees after ``reset()`` or a ``step()``.

    Attributes:
        text: The observation text (task text on reset, a tool result after a step).
        tools: The OpenAI-format schemas of the tools on offer (set on reset).
        done: Whether the episode is over (``terminated or truncated``).
        reward: Reward for this step; sessions give 0 until verification.
        terminated: The task is over because the agent (or the world) ended it.
        truncated: The episode was cut off by a budget (turns, tokens, time).
        error: Set when the action failed (unknown tool, bad arguments, tool error).
    """

    text: str
    tools: tuple[dict[str, Any], ...] = ()
    done: bool = False
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    error: str | None = None


def error_observation(message: str, done: bool = False) -> Observation:
    """Return the observation for a failed action: ``Error: <message>``."""
    return Observation(f"Error: {message}", done=done, error=message)


def assistant_message(call: ToolCall) -> dict[str, Any]:
    """Return the OpenAI chat message of an assistant turn that makes ``call``."""
    return {"role": "assistant", "content": None, "tool_calls": [call.to_openai()]}


def tool_message(call: ToolCall, text: str) -> dict[str, Any]:
    """Return the OpenAI chat message that carries ``call``'s result."""
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text}


@dataclass(frozen=True)
class Step:
    """One turn: what the model said, the action parsed from it, and what came back.

    Attributes:
        call: The parsed tool call, or ``None`` when the model's output did not parse.
        observation: What the env (or the harness, for unparseable output) answered.
        output: The model's raw text for this turn.
        prompt_tokens: Tokens the model read for this turn.
        completion_tokens: Tokens the model generated for this turn.
        latency_s: Seconds this turn took: the model's own time (not time queued behind other
            episodes' requests) plus the env's.
        substeps: When ``call`` is a skill (see :class:`~ratchet.core.memory.Skill`), the env
            tool calls it made, each with its own observation; empty otherwise.
    """

    call: ToolCall | None
    observation: Observation
    output: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    substeps: tuple[Step, ...] = ()

    @property
    def failed(self) -> bool:
        """Whether this step ended in an error observation."""
        return self.observation.error is not None


def tool_steps(steps: Sequence[Step]) -> list[Step]:
    """``steps`` with each skill call replaced by the env tool calls it made.

    What the env saw, in order: what replays, hindsight and skill mining read.
    """
    return [inner for step in steps for inner in (step.substeps or (step,))]


@dataclass(frozen=True)
class Exploration:
    """How a training episode explored: the record the explorer leaves on it.

    Probe and test episodes carry none: they play the agent as it is.

    Attributes:
        strategy: The proposal strategy that steered the episode (``"policy"``: the agent's own
            replies, nothing constrained).
        temperature: The episode's sampling temperature (``None``: the agent's own).
        parent: The sample this episode branched from (``None``: a root, played from the
            start).
        branch_turn: Turns replayed from ``parent`` before the episode branched (0 for a root).
        distinct: Whether the action at ``branch_turn`` differs from every action taken there
            before (always true for a root).
        replay_matched: Whether every replayed turn met the observation ``parent`` met (an env
            that is not deterministic breaks this, and search falls back to sampling).
        discarded_tokens: Tokens generated for replies the episode drew again (a branching
            action that repeated one tried before): spent, though not in its steps.
    """

    strategy: str = "policy"
    temperature: float | None = None
    parent: int | None = None
    branch_turn: int = 0
    distinct: bool = True
    replay_matched: bool = True
    discarded_tokens: int = 0

    @property
    def own(self) -> bool:
        """Whether the outcome is the agent's own: a root that nothing steered."""
        return self.parent is None and self.strategy == "policy"


@dataclass(frozen=True)
class Trajectory:
    """One episode, start to verdict.

    Attributes:
        task: The task played.
        agent: The agent version that played it (e.g. ``"base"``, ``"oracle"``, ``"v3"``).
        env_version: The env's version string at the time.
        messages: The conversation in OpenAI chat format (system, user, assistant, tool).
        tools: The OpenAI-format tool schemas that were offered.
        steps: One entry per turn.
        verdict: The verifier's judgement; ``None`` if the episode crashed before verifying.
        model: The model reference that produced the actions.
        sample: Index of this sample among the k drawn for the same task.
        seconds: Time the episode spent working (model and env), queueing excluded.
        terminated: The task ended (the agent called ``finish`` or the world ended it).
        truncated: A budget (turns, tokens, time) cut the episode short.
        error: Why the episode crashed, if it did.
        metadata: Provenance: demonstrations shown, hindsight source, context trimming.
        exploration: How a training episode explored (``None`` for episodes played as the
            agent is: probes, tests, evals).
    """

    task: Task
    agent: str
    env_version: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    steps: tuple[Step, ...] = ()
    verdict: Verdict | None = None
    model: str = ""
    sample: int = 0
    seconds: float = 0.0
    terminated: bool = False
    truncated: bool = False
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    exploration: Exploration | None = None

    @property
    def passed(self) -> bool:
        """Whether the verifier passed the episode."""
        return self.verdict is not None and self.verdict.passed

    @property
    def score(self) -> float:
        """The verifier's score, 0 for a crashed episode."""
        return self.verdict.score if self.verdict else 0.0

    @property
    def prompt_tokens(self) -> int:
        """Tokens read by the model over the episode."""
        return sum(s.prompt_tokens for s in self.steps)

    @property
    def completion_tokens(self) -> int:
        """Tokens generated by the model over the episode."""
        return sum(s.completion_tokens for s in self.steps)

    @property
    def tokens(self) -> int:
        """Tokens read and generated over the episode."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def errors(self) -> int:
        """Number of steps that ended in an error observation."""
        return sum(s.failed for s in self.steps)

    @property
    def calls(self) -> list[ToolCall]:
        """The tool calls the episode made, in order (unparsed turns left out)."""
        return [step.call for step in self.steps if step.call is not None]
