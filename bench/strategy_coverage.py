"""Which solutions each exploration strategy can produce at all, scored against the oracles.

A strategy narrows what the decoder lets a reply be (:mod:`ratchet.improve.explore.strategies`);
a solution whose action it does not admit can never be found under it, however long the search.
This plays the oracle's solution of ``--tasks`` training-split tasks a level of each built-in
env through the engine (a scripted model replies with the oracle's calls, so the prompts are
the ones an agent sees) and, at every turn, asks each strategy what it would let the reply be
there, the strategy steering from the first turn on (``close``: at the ``finish`` turn only, its
branching action). An action counts as admitted if the oracle's is, or if one the strategy
admits there lets the rest of the oracle's plan pass (a verifier may take many). It prints,
per strategy, the share of solutions whose every action it admits, and the actions it most
often refuses (task family, tool and turn). The oracle is read here only to
score the strategies; exploration never reads it. No model runs.

Usage: ``python bench/strategy_coverage.py [--tasks 24] [--envs calc grid files shop]``
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import jsonschema

from ratchet.core.agent import Agent
from ratchet.core.env import FINISH, Env
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Exploration
from ratchet.engine.harness import Policy, parse_action, replay
from ratchet.engine.models.base import Completion, Prompt, tool_name
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig, SteeredPolicy, rollout
from ratchet.envs.registry import load_env_reference
from ratchet.improve.explore.copying import closed_values
from ratchet.improve.explore.strategies import STRATEGIES, Track, reply_tools
from ratchet.improve.practice import policy_of

MAX_JOINED = 3
"""Most of the oracle's own values an alternative joins (as the ``list`` strategy may)."""
MAX_FOUND = 8
"""Most values found in the oracle's own that alternatives join (the first ones)."""
MAX_ALTERNATIVES = 60
"""Most admitted values of an argument tried where the oracle's own is refused."""


@dataclass
class _Score:
    """One strategy's count over the solutions played."""

    admitted: int = 0
    played: int = 0
    refused: Counter[str] = field(default_factory=Counter)


def _parameters(tools: tuple[dict[str, Any], ...], name: str) -> dict[str, Any] | None:
    """The parameters schema of tool ``name`` among ``tools`` (``None``: not offered)."""
    for tool in tools:
        if tool_name(tool) == name:
            parameters = tool.get("function", tool).get("parameters")
            return parameters if isinstance(parameters, dict) else {"type": "object"}
    return None


def _admits(tools: tuple[dict[str, Any], ...] | None, call: ToolCall) -> bool:
    """Whether a reply constrained to ``tools`` (``None``: free) can be ``call``."""
    if tools is None:
        return True
    schema = _parameters(tools, call.name)
    return schema is not None and _validator(json.dumps(schema)).is_valid(call.arguments)


@functools.lru_cache(maxsize=64)
def _validator(schema: str) -> jsonschema.protocols.Validator:
    """A validator of ``schema`` (JSON text), kept: a listing pattern is long to compile."""
    return jsonschema.Draft202012Validator(json.loads(schema))


def _passing_alternative(
    env: Env,
    task: Task,
    calls: tuple[list[ToolCall], ToolCall, list[ToolCall]],
    offered: tuple[tuple[dict[str, Any], ...] | None, tuple[dict[str, Any], ...] | None],
) -> bool:
    """Whether a call the strategy admits in place of the oracle's lets the oracle's plan pass.

    ``calls`` is the oracle's plan split at the refused call: before it, it, after it;
    ``offered`` the tools the strategy offers there, and the same with one value a string. A
    verifier may take many actions (grid's ``finish`` takes any answer; a file may be written
    with or without a final newline), so each argument is given, one at a time, each single
    value the strategy admits for it (at most :data:`MAX_ALTERNATIVES`) and each few of the
    values found in the oracle's, joined as the strategy may join them; an alternative the
    strategy admits is replayed with the rest of the plan.
    """
    before, call, after = calls
    tools, single = offered
    schema = _parameters(single or (), call.name) or {}
    options = schema.get("anyOf", [schema])
    for name, value in call.arguments.items():
        values = [
            v for o in options for v in closed_values(o.get("properties", {}).get(name, {})) or []
        ]
        found = _found(str(value), [v for v in values if isinstance(v, str)])[:MAX_FOUND]
        joined = [
            separator.join(part)
            for size in range(2, MAX_JOINED + 1)
            for part in itertools.combinations(found, size)
            for separator in (", ", "\n")
        ]
        for other in [*values[:MAX_ALTERNATIVES], *joined]:
            changed = ToolCall(call.name, {**call.arguments, name: other})
            if _admits(tools, changed) and replay(env, task, [*before, changed, *after]).passed:
                return True
    return False


def _found(text: str, values: list[str]) -> list[str]:
    """The ``values`` found in ``text`` from left to right, the longest first where they overlap."""
    found, position = [], 0
    while True:
        hits = [(text.find(v, position), -len(v), v) for v in values if v and v in text[position:]]
        if not hits:
            return found
        start, _, value = min(hits)
        found.append(value)
        position = start + len(value)


@dataclass
class _Scoring:
    """An episode's policy that lets the oracle reply and scores each strategy's constraint."""

    inner: Policy
    env: Env
    task: Task
    refusals: dict[str, str | None]
    tracks: dict[str, Track] = field(default_factory=dict)
    plan: list[ToolCall] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def __call__(self, prompt: Prompt, turn: int) -> Completion:
        completion = self.inner(prompt, turn)
        call = parse_action(completion)
        if not isinstance(call, ToolCall):
            return completion
        shared = policy_of(self.env)
        for strategy in STRATEGIES:
            track = self.tracks.setdefault(strategy.name, Track())
            if strategy.closes and call.name != FINISH:
                track.record(prompt, call)
                continue
            tool = FINISH if strategy.closes else None
            tools = reply_tools(strategy, prompt, track, tool=tool, shared=shared)
            single = reply_tools(
                replace(strategy, joins=1), prompt, track, tool=tool, shared=shared
            )
            after = self.plan[len(self.calls) + 1 :]
            admitted = _admits(tools, call) or _passing_alternative(
                self.env, self.task, (self.calls, call, after), (tools, single)
            )
            if not admitted and self.refusals.get(strategy.name) is None:
                self.refusals[strategy.name] = f"{self.task.family}: {call.name} at turn {turn + 1}"
            track.record(prompt, call)
        self.calls.append(call)
        return completion

    def record(self) -> Exploration:
        return Exploration()


@dataclass(frozen=True)
class _Steering:
    """Wraps the episode's policy in a :class:`_Scoring` that reports to ``refusals``."""

    env: Env
    task: Task
    plan: list[ToolCall]
    refusals: dict[str, str | None]

    def wrap(self, policy: Policy) -> SteeredPolicy:
        return _Scoring(policy, self.env, self.task, self.refusals, plan=self.plan)


def _oracle_model(plan: list[ToolCall]) -> FakeModel:
    """A scripted model whose reply at each turn is the oracle's call of ``plan`` for it."""

    def reply(prompt: Prompt, rng: random.Random) -> str:
        turn = sum(1 for m in prompt.messages if m.get("role") == "assistant")
        call = plan[min(turn, len(plan) - 1)]
        return json.dumps({"name": call.name, "arguments": call.arguments})

    return FakeModel(reply=reply)


def _score(env: Env, tasks: list[Task]) -> tuple[dict[str, _Score], int]:
    """Each strategy's score over the oracle's solutions of ``tasks`` (and how many passed)."""
    scores = {s.name: _Score() for s in STRATEGIES}
    passed = 0
    for task in tasks:
        refusals: dict[str, str | None] = {}
        plan = list(env.oracle(task))
        steering = _Steering(env, task, plan, refusals)
        played = rollout(
            env,
            [task],
            Agent(model="fake"),
            _oracle_model(plan),
            RolloutConfig(concurrency=1),
            steer=lambda task, sample, s=steering: s,
        )
        if not played[0].passed:
            continue
        passed += 1
        for name, score in scores.items():
            score.played += 1
            where = refusals.get(name)
            score.admitted += where is None
            if where is not None:
                score.refused[where] += 1
    return scores, passed


def _show(name: str, level: int, scores: dict[str, _Score], passed: int, tasks: int) -> None:
    print(f"{name} level {level}: {passed} of {tasks} oracle solutions passed and were scored")
    for strategy, score in scores.items():
        common = ", ".join(f"{where} ({n})" for where, n in score.refused.most_common(6))
        share = f"{score.admitted}/{score.played}" if score.played else "-"
        print(f"  {strategy:8} admits {share:>7}" + (f"; refuses {common}" if common else ""))


def main() -> None:
    """Print each strategy's coverage of the oracles' solutions, per env and level."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--envs", nargs="+", default=["calc", "grid", "files", "shop"])
    parser.add_argument("--levels", nargs="+", type=int, default=[1, 2, 3])
    args = parser.parse_args()
    for name in args.envs:
        env = load_env_reference(name)
        for level in [lv for lv in args.levels if lv <= env.max_difficulty]:
            tasks = env.tasks("train", args.tasks, seed=0, difficulty=level)
            scores, passed = _score(env, tasks)
            _show(name, level, scores, passed, len(tasks))


if __name__ == "__main__":
    main()
