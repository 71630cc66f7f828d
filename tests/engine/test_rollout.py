import json
from dataclasses import dataclass, replace
from functools import partial
from types import SimpleNamespace

import pytest

from ratchet.core.agent import Agent
from ratchet.core.memory import Exemplar
from ratchet.core.trajectory import Exploration
from ratchet.engine import harness
from ratchet.engine.batching import Batcher
from ratchet.engine.harness import Budget
from ratchet.engine.models import ModelError
from ratchet.engine.models.base import Completion
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.calc import env


def oracle_reply(prompt, rng):
    """Reply with the env oracle's next call for the task in the prompt."""
    shown = {m["content"] for m in prompt.messages if m["role"] == "user"}
    task = next(t for t in TASKS if t.instruction in shown)
    step = sum(1 for m in prompt.messages if m["role"] == "tool")
    call = env.oracle(task)[step]
    return json.dumps({"name": call.name, "arguments": call.arguments})


TASKS = env.tasks("test", 6, seed=2)


def test_scripted_agents_need_no_model():
    oracle = rollout(env, TASKS, Agent(version="oracle"), None, k=2)
    assert len(oracle) == 12 and all(t.passed for t in oracle)
    assert [(t.task.id, t.sample) for t in oracle[:2]] == [(TASKS[0].id, 0), (TASKS[0].id, 1)]
    null = rollout(env, TASKS, Agent(version="null"), None)
    assert not any(t.passed for t in null)


class BatchedFake(FakeModel):
    """A fake that, like the local model, wants batches (so the scheduler batches for it)."""

    max_batch_size = 4
    batches: tuple[int, ...] = ()

    def complete(self, prompts, sampling):
        self.batches += (len(prompts),)
        return super().complete(prompts, sampling)


@pytest.fixture
def patient_batcher(monkeypatch):
    """Make the rollout's batcher wait for every episode in flight, however late it asks.

    The batcher runs a batch once every episode in flight has asked, or once the oldest request
    has waited ``max_wait_s`` (50 ms). On a loaded machine a thread can start or come back from
    its env step later than that, and the batch sizes would then depend on thread timing. With
    this wait (only a hang guard: the scheduler keeps the count in flight true, so no batch
    waits for it) a batch always holds every episode in flight, up to the model's largest batch.
    """
    monkeypatch.setattr("ratchet.engine.rollout.Batcher", partial(Batcher, max_wait_s=30))


def test_model_driven_rollout_batches_concurrent_episodes_and_keeps_order(patient_batcher):
    model = BatchedFake(reply=oracle_reply)
    result = rollout(env, TASKS, Agent(model="fake"), model, RolloutConfig(concurrency=4))
    assert [t.task.id for t in result] == [t.id for t in TASKS]
    assert all(t.passed for t in result)
    assert max(model.batches) == 4 and sum(model.batches) == sum(len(t.steps) for t in result)


def test_an_episode_samples_alike_whatever_batch_it_shares(patient_batcher):
    def guess(prompt, rng):
        return json.dumps({"name": "finish", "arguments": {"answer": str(rng.randrange(10**6))}})

    def answers(concurrency):
        model = BatchedFake(reply=guess)
        played = rollout(env, TASKS, Agent(model="fake"), model, RolloutConfig(concurrency))
        assert max(model.batches) == min(concurrency, 4)
        return [t.steps[0].call.arguments["answer"] for t in played]

    alone = answers(1)
    assert answers(4) == alone and len(set(alone)) == len(TASKS)


def test_remote_style_models_are_called_per_episode():
    model = FakeModel(reply=oracle_reply)
    result = rollout(env, TASKS, Agent(model="fake"), model, RolloutConfig(concurrency=4))
    assert all(t.passed for t in result)
    assert model.calls == sum(len(t.steps) for t in result)


def test_a_dead_backend_fails_the_rollout_with_the_first_error():
    class Dead(FakeModel):
        def complete(self, prompts, sampling):
            return [Completion("", error="HTTP 401: bad key") for _ in prompts]

    stored = []
    with pytest.raises(ModelError, match=r"every model call failed .* HTTP 401: bad key"):
        rollout(env, TASKS, Agent(model="fake"), Dead(), on_trajectory=stored.append)
    assert len(stored) == len(TASKS)


def test_skip_resumes_and_callback_sees_each_trajectory():
    seen = []
    model = FakeModel()
    result = rollout(
        env,
        TASKS,
        Agent(model="fake"),
        model,
        k=2,
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


def test_a_failing_session_or_oracle_is_one_crashed_scripted_episode():
    from dataclasses import replace

    broken_world = TASKS[1].id
    broken_plan = TASKS[2].id

    def build(task):
        if task.id == broken_world:
            raise RuntimeError("no world today")
        return env.build(task)

    def oracle(task):
        if task.id == broken_plan:
            raise RuntimeError("no plan today")
        return env.oracle(task)

    flaky = replace(env, build=build, oracle=oracle)
    episodes = rollout(flaky, TASKS, Agent(version="oracle"), None)
    assert len(episodes) == len(TASKS)
    errors = {t.task.id: t.error for t in episodes if t.error}
    assert set(errors) == {broken_world, broken_plan}
    assert "no world today" in errors[broken_world] and "no plan today" in errors[broken_plan]
    assert sum(t.passed for t in episodes) == len(TASKS) - 2


def test_a_loaded_machine_slows_episodes_down_instead_of_truncating_them(
    patient_batcher, monkeypatch
):
    """Eight episodes share a model that completes two prompts per 50 ms call.

    Each turn an episode queues behind about three other batches (~150 ms) and then gets its
    50 ms share of the call. Only that share counts against its 0.4 s budget (the harness's own
    clock stands still here, so the env steps count nothing however loaded the machine is): every
    episode plays all four turns in 0.2 s of its own, though ~0.8 s of wall time, and no reply's
    latency carries the time it queued. Before the budget excluded queueing, `ratchet eval` under
    load cut every episode after its first turn (tests/engine/test_harness.py checks the budget).
    """
    import time

    class SlowBatches(BatchedFake):
        max_batch_size = 2

        def complete(self, prompts, sampling):
            time.sleep(0.05)
            done = super().complete(prompts, sampling)
            return [replace(c, latency_s=0.05) for c in done]

    monkeypatch.setattr(harness, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    model = SlowBatches(script=[json.dumps({"name": "add", "arguments": {"a": 1, "b": 2}})])
    budget = Budget(max_turns=4, max_episode_tokens=10_000, timeout_s=0.4)
    config = RolloutConfig(concurrency=8, budget=budget)
    tasks = env.tasks("test", 8, seed=5)
    result = rollout(env, tasks, Agent(model="fake"), model, config)
    assert max(model.batches) == 2 and sum(model.batches) == 32  # queued behind each other
    assert all(len(t.steps) == 4 and t.seconds == pytest.approx(0.2) for t in result)


@dataclass(frozen=True)
class HotSteering:
    """A steering that samples its episode at its own temperature and says so."""

    temperature: float

    def wrap(self, policy):
        steering = self

        class Steered:
            def __call__(self, prompt, turn):
                return policy(replace(prompt, temperature=steering.temperature), turn)

            def record(self):
                return Exploration(strategy="hot", temperature=steering.temperature)

        return Steered()


def test_a_steering_wraps_each_episode_policy_and_leaves_its_record(patient_batcher):
    seen = []

    def reply(prompt, rng):
        seen.append(prompt.temperature)
        return oracle_reply(prompt, rng)

    model = BatchedFake(reply=reply)
    temperatures = {
        (t.id, s): 0.3 + 0.1 * i + 0.05 * s for i, t in enumerate(TASKS[:4]) for s in (0, 1)
    }
    result = rollout(
        env,
        TASKS[:4],
        Agent(model="fake"),
        model,
        RolloutConfig(concurrency=4),
        k=2,
        steer=lambda task, sample: HotSteering(temperatures[(task.id, sample)]),
    )
    assert [t.exploration.temperature for t in result] == [
        temperatures[(t.task.id, t.sample)] for t in result
    ]
    assert {t.exploration.strategy for t in result} == {"hot"}
    assert set(seen) == set(temperatures.values())
    # Every episode has a temperature of its own, yet four of them shared a call.
    assert max(model.batches) == 4
    plain = rollout(env, TASKS[:1], Agent(model="fake"), BatchedFake(reply=oracle_reply))
    assert plain[0].exploration is None
    unsteered = rollout(
        env,
        TASKS[:1],
        Agent(model="fake"),
        BatchedFake(reply=oracle_reply),
        steer=lambda t, s: None,
    )
    assert unsteered[0].exploration is None
