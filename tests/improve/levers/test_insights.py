import json

import pytest

from ratchet.core.agent import Agent
from ratchet.core.memory import Insight
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.engine.models.fake import FakeModel
from ratchet.envs.calc import env
from ratchet.improve.levers import LeverContext, NoCandidate
from ratchet.improve.levers.insights import (
    InsightLever,
    acceptable,
    apply_operations,
    contrast_pairs,
    specific_values,
)

TASKS = env.tasks("train", 12, difficulty=1)


def experience():
    good = [replay(env, t, env.oracle(t)) for t in TASKS]
    bad = [replay(env, t, [ToolCall("finish", {"answer": "0"})]) for t in TASKS]
    return good + bad


def reflector(operations):
    reply = json.dumps({"name": "update_rules", "arguments": {"operations": operations}})
    return FakeModel(script=[reply])


def test_pairs_match_failures_with_successes_of_the_same_task():
    pairs = contrast_pairs(experience(), limit=5, seed=0)
    assert len(pairs) == 5
    assert all(f.task.id == s.task.id and not f.passed and s.passed for f, s in pairs)


def test_rules_that_copy_task_values_are_rejected():
    specific = specific_values(experience())
    number = str(TASKS[0].params["start"])
    assert not acceptable(f"Remember that the first number is {number} in these tasks.", specific)
    assert acceptable("Call finish with the last tool result as the answer.", specific)
    assert not acceptable("Too short", specific)


def test_operations_add_merge_vote_and_drop():
    rules = [Insight("Use the add tool for sums before finishing.")]
    rules = apply_operations(
        rules,
        [
            {"op": "ADD", "index": 0, "rule": "Use the add tool for sums before finishing!"},
            {"op": "ADD", "index": 0, "rule": "Call finish with the last tool result."},
            {"op": "DOWNVOTE", "index": 1, "rule": ""},
            {"op": "DOWNVOTE", "index": 1, "rule": ""},
            {"op": "EDIT", "index": 7, "rule": "Out of range edits are ignored."},
            "not an operation",
        ],
        specific=set(),
    )
    assert rules == [Insight("Use the add tool for sums before finishing.", helpful=2)]


def test_the_lever_updates_the_system_prompt_rules(tmp_path):
    model = reflector([{"op": "ADD", "index": 0, "rule": "Always call finish with the result."}])
    lever_context = LeverContext(
        env=env,
        incumbent=Agent(model="fake"),
        experience=experience(),
        model=model,
        reflector=None,
        trainer=None,
        workdir=tmp_path,
        version="v2",
    )
    candidate = InsightLever(reflections=2).propose(lever_context)
    assert candidate is not None and candidate.lever == "insights"
    assert candidate.insights == (Insight("Always call finish with the result.", helpful=2),)


def test_junk_reflections_give_no_candidate(tmp_path):
    lever_context = LeverContext(
        env=env,
        incumbent=Agent(model="fake"),
        experience=experience(),
        model=FakeModel(script=["no json at all"]),
        reflector=None,
        trainer=None,
        workdir=tmp_path,
        version="v2",
    )
    with pytest.raises(NoCandidate):
        InsightLever().propose(lever_context)
