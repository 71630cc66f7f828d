"""The episode loop: assemble the prompt, parse the model's action, run it, feed back the result.

An :class:`Episode` advances one turn per :meth:`Episode.advance` call so that the rollout
engine can batch the next turn of many episodes into one model call. Everything the model gets
wrong (unparseable output, unknown tools, bad arguments) becomes an observation it can react to;
budgets on turns, generated tokens and wall time end the episode as ``truncated``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from ratchet.agent import Agent, Exemplar
from ratchet.env import Env, Observation, Session
from ratchet.models.base import Completion, Prompt
from ratchet.task import Task
from ratchet.tool import ToolCall
from ratchet.trajectory import Step, Trajectory

CALL_FORMAT = '{"name": "<tool name>", "arguments": {<arguments>}}'
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Limits:
    """Budgets for one episode.

    Attributes:
        max_turns: Model calls before the episode is truncated.
        max_episode_tokens: Generated tokens, summed over turns, before truncation.
        timeout_s: Wall-clock seconds before truncation.
    """

    max_turns: int = 8
    max_episode_tokens: int = 2048
    timeout_s: float = 300.0


def system_message(agent: Agent) -> dict[str, Any]:
    """Return the system message: the agent's prompt plus the insights it has learned."""
    text = agent.system_prompt
    if agent.insights:
        text += "\n\nRules learned from experience:\n" + "\n".join(
            f"- {i.rule}" for i in agent.insights
        )
    return {"role": "system", "content": text}


def demonstration(exemplar: Exemplar) -> list[dict[str, Any]]:
    """Return an exemplar as conversation turns to place before the real task."""
    return [{"role": "user", "content": exemplar.instruction}, *exemplar.turns]


def parse_action(completion: Completion) -> ToolCall | str:
    """Return the tool call in a completion, or a message saying why there is none."""
    if completion.tool_calls:
        return completion.tool_calls[0]
    text = completion.text.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    start = text.find("{")
    if start < 0:
        return "the reply contains no JSON object"
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        return f"the reply is not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return 'the JSON object has no string "name"'
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return '"arguments" is a string that is not valid JSON'
    if not isinstance(arguments, dict):
        return '"arguments" must be a JSON object'
    return ToolCall(data["name"], arguments)


class Episode:
    """One episode of an agent in an env, advanced turn by turn.

    Args:
        env: The env that made the task.
        task: The task to play.
        agent: The agent playing it.
        demonstrations: Exemplars to show before the task.
        limits: Budgets on turns, tokens and time.
        sample: Index of this sample among the k drawn for the task.
    """

    def __init__(
        self,
        env: Env,
        task: Task,
        agent: Agent,
        demonstrations: tuple[Exemplar, ...] = (),
        limits: Limits | None = None,
        sample: int = 0,
    ) -> None:
        self.env, self.task, self.agent, self.sample = env, task, agent, sample
        self.limits = limits or Limits(max_turns=agent.max_turns)
        self.demonstrations = demonstrations
        self.steps: list[Step] = []
        self.error: str | None = None
        self.truncated = False
        self.started = time.perf_counter()
        self.session: Session | None = None
        self.first = Observation("")
        self.messages: list[dict[str, Any]] = [system_message(agent)]
        try:
            self.session = env.session(task)
            self.first = self.session.reset()
            self.messages.append({"role": "user", "content": self.first.text})
        except Exception as exc:  # a broken env ends this episode, not the run
            self.error = f"env failed to start: {type(exc).__name__}: {exc}"

    @property
    def done(self) -> bool:
        """Whether the episode is over (finished, truncated or crashed)."""
        last = self.steps[-1].observation if self.steps else None
        return self.error is not None or self.truncated or bool(last and last.done)

    def prompt(self) -> Prompt:
        """Return the conversation for the next model call, demonstrations included."""
        context = [turn for ex in self.demonstrations for turn in demonstration(ex)]
        messages = [self.messages[0], *context, *self.messages[1:]]
        return Prompt(tuple(messages), self.first.tools)

    def advance(self, completion: Completion) -> None:
        """Apply the model's reply: parse it, run the action, record the step, check budgets."""
        if completion.error is not None:
            self.error = f"model error: {completion.error}"
            return
        action = parse_action(completion)
        tick = time.perf_counter()
        if isinstance(action, str):
            message = f"{action}. Reply with one tool call as JSON: {CALL_FORMAT}"
            observation = Observation(f"Error: {message}", error=message)
            self.messages.append({"role": "assistant", "content": completion.text})
            self.messages.append({"role": "user", "content": observation.text})
            call = None
        else:
            call = ToolCall(action.name, action.arguments, id=f"call_{len(self.steps)}")
            if self.session is None:
                raise RuntimeError("advance() called on an episode whose env failed to start")
            try:
                observation = self.session.step(call)
            except Exception as exc:  # sessions should not raise; if one does, stop here
                self.error = f"env step failed: {type(exc).__name__}: {exc}"
                return
            self.messages.append(
                {"role": "assistant", "content": None, "tool_calls": [call.to_openai()]}
            )
            self.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "name": call.name,
                    "content": observation.text,
                }
            )
        self.steps.append(
            Step(
                call,
                observation,
                output=completion.text,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                latency_s=completion.latency_s + time.perf_counter() - tick,
            )
        )
        self._check_budgets()

    def _check_budgets(self) -> None:
        if self.done:
            return
        generated = sum(s.completion_tokens for s in self.steps)
        self.truncated = (
            len(self.steps) >= self.limits.max_turns
            or generated >= self.limits.max_episode_tokens
            or time.perf_counter() - self.started >= self.limits.timeout_s
        )

    def result(self) -> Trajectory:
        """Verify the world, release it and return the trajectory."""
        verdict = None
        if self.session is not None:
            try:
                if self.error is None:
                    verdict = self.session.verify()
            except Exception as exc:
                self.error = f"verifier failed: {type(exc).__name__}: {exc}"
            finally:
                self.session.close()
        return Trajectory(
            task=self.task,
            agent=self.agent.version,
            env_version=self.env.version,
            messages=tuple(self.messages),
            tools=self.first.tools,
            steps=tuple(self.steps),
            verdict=verdict,
            model=self.agent.model,
            sample=self.sample,
            seconds=time.perf_counter() - self.started,
            terminated=any(s.observation.terminated for s in self.steps),
            truncated=self.truncated,
            error=self.error,
            metadata={"exemplars": [ex.instruction for ex in self.demonstrations]},
        )
