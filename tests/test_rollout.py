import json

import pytest

from ratchet.agent import Agent, Exemplar
from ratchet.envs.calc import env
from ratchet.models.fake import FakeModel
from ratchet.rollout import RolloutConfig, rollout


def oracle_reply(prompt, rng):
    """Reply with the env oracle's next call for the task in the prompt."""
    shown = {m["content"] for m in prompt.messages if m["role"] == "user"}
    task = next(t for t in TASKS if t.instruction in shown)
    step = sum(1 for m in prompt.messages if m["role"] == "tool")
    call = env.oracle(task)[step]
    return json.dumps({"name": call.name, "arguments": call.arguments})


TASKS = env.tasks("test", 6, seed=2)


def test_scripted_agents_need_no_model():
    oracle = rollout(env, TASKS, Agent(version="oracle"), None, RolloutConfig(k=2))
    assert len(oracle) == 12 and all(t.passed for t in oracle)
    assert [(t.task.id, t.sample) for t in oracle[:2]] == [(TASKS[0].id, 0), (TASKS[0].id, 1)]
    null = rollout(env, TASKS, Agent(version="null"), None)
    assert not any(t.passed for t in null)


def test_model_driven_rollout_batches_turns_and_keeps_order():
    model = FakeModel(reply=oracle_reply)
    calls_per_batch = []
    original = model.complete

    def spy(prompts, sampling):
        calls_per_batch.append(len(prompts))
        return original(prompts, sampling)

    model.complete = spy  # type: ignore[method-assign]
    result = rollout(env, TASKS, Agent(model="fake"), model, RolloutConfig(concurrency=4))
    assert [t.task.id for t in result] == [t.id for t in TASKS]
    assert all(t.passed for t in result)
    assert max(calls_per_batch) == 4


def test_skip_resumes_and_callback_sees_each_trajectory():
    seen = []
    model = FakeModel()
    result = rollout(
        env,
        TASKS,
        Agent(model="fake"),
        model,
        RolloutConfig(k=2),
        skip={(TASKS[0].id, 0), (TASKS[1].id, 1)},
        on_trajectory=seen.append,
    )
    assert len(result) == 10 and len(seen) == 10
    assert (TASKS[0].id, 0) not in {(t.task.id, t.sample) for t in result}


def test_model_agent_without_model_is_refused():
    with pytest.raises(ValueError, match="needs a model"):
        rollout(env, TASKS, Agent(model="fake"), None)


def test_exemplars_are_retrieved_into_the_prompt():
    demo = Exemplar("calc", "expression", 1, "Compute 1 + 2.", ())
    seen_prompts = []

    def reply(prompt, rng):
        seen_prompts.append(prompt)
        return json.dumps({"name": "finish", "arguments": {"answer": "0"}})

    agent = Agent(model="fake", exemplars=(demo,), exemplars_per_task=1)
    trajectories = rollout(env, TASKS[:2], agent, FakeModel(reply=reply))
    assert all(p.messages[1]["content"] == "Compute 1 + 2." for p in seen_prompts)
    assert trajectories[0].metadata["exemplars"] == ["Compute 1 + 2."]
