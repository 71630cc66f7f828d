"""A calc agent for search tests that honours the decoder's constraints as a local model does."""

from __future__ import annotations

import json

from ratchet.core.agent import Agent
from ratchet.engine.models.base import offered_tools
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import rollout
from ratchet.envs.calc import env

TASKS = env.tasks("train", 6, seed=3, difficulty=2)


def task_of(prompt, tasks=TASKS):
    shown = {m["content"] for m in prompt.messages if m["role"] == "user"}
    return next(t for t in tasks if t.instruction in shown)


def eager(tasks=TASKS, calls=1):
    """A calc agent that has learned ``calls`` steps: it makes the oracle's first ``calls`` calls,
    then finishes with the last result, whatever the task needs.

    Like a constrained decoder it never calls a tool the prompt's ``reply_tools`` leave out: where
    ``finish`` is left out it makes the oracle's next call instead, and where that is left out
    too, the first tool offered (with arguments 1 and 1).
    """

    def reply(prompt, rng):
        task = task_of(prompt, tasks)
        results = [m["content"] for m in prompt.messages if m["role"] == "tool"]
        allowed = [t["function"]["name"] for t in offered_tools(prompt)]
        plan = env.oracle(task)
        if len(results) >= calls and "finish" in allowed:
            return json.dumps({"name": "finish", "arguments": {"answer": results[-1]}})
        call = plan[min(len(results), len(plan) - 2)]
        if call.name in allowed:
            return json.dumps({"name": call.name, "arguments": call.arguments})
        name = next(n for n in allowed if n != "finish") if len(allowed) > 1 else allowed[0]
        if name == "finish":
            return json.dumps({"name": "finish", "arguments": {"answer": "0"}})
        return json.dumps({"name": name, "arguments": {"a": 1, "b": 1}})

    return FakeModel(reply=reply)


def roots(model, tasks=TASKS, k=1, steer=None):
    """Play ``tasks`` ``k`` times each with ``model`` (steered by ``steer``)."""
    return rollout(env, tasks, Agent(model="fake"), model, k=k, steer=steer)
