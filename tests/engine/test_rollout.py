import json
from dataclasses import replace

import pytest

from ratchet.core.agent import Agent
from ratchet.core.memory import Exemplar
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import Budget
from ratchet.engine.models import ModelError
from ratchet.engine.models.base import Completion
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import Exploration, RolloutConfig, drawn_tool, rollout
from ratchet.envs.calc import env
from ratchet.envs.grid import env as grid


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


def test_model_driven_rollout_batches_concurrent_episodes_and_keeps_order():
    model = BatchedFake(reply=oracle_reply)
    result = rollout(env, TASKS, Agent(model="fake"), model, RolloutConfig(concurrency=4))
    assert [t.task.id for t in result] == [t.id for t in TASKS]
    assert all(t.passed for t in result)
    assert max(model.batches) == 4 and sum(model.batches) == sum(len(t.steps) for t in result)


def test_an_episode_samples_alike_whatever_batch_it_shares():
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


def test_a_loaded_machine_slows_episodes_down_instead_of_truncating_them():
    """Eight episodes share a model that completes two prompts per 50 ms call.

    Each turn an episode waits behind about three other batches (~150 ms queued) and then works
    50 ms itself, so four turns take it ~800 ms of wall time. Its 400 ms time budget counts only
    its own work (~200 ms), so every episode plays all four turns: before the budget excluded
    queueing, `ratchet eval` under load cut every episode after its first turn.
    """
    import time

    class SlowBatches(BatchedFake):
        max_batch_size = 2

        def complete(self, prompts, sampling):
            time.sleep(0.05)
            done = super().complete(prompts, sampling)
            return [replace(c, latency_s=0.05) for c in done]

    model = SlowBatches(script=[json.dumps({"name": "add", "arguments": {"a": 1, "b": 2}})])
    budget = Budget(max_turns=4, max_episode_tokens=10_000, timeout_s=0.4)
    config = RolloutConfig(concurrency=8, budget=budget)
    tasks = env.tasks("test", 8, seed=5)
    result = rollout(env, tasks, Agent(model="fake"), model, config)
    assert max(model.batches) == 2 and len(model.batches) >= 16  # queued behind each other
    assert all(len(t.steps) == 4 and t.seconds < 0.4 for t in result)


def test_each_episode_can_sample_at_its_own_temperature_in_one_batch():
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
        explore=lambda task, sample: Exploration(temperatures[(task.id, sample)]),
    )
    assert [t.metadata["temperature"] for t in result] == [
        temperatures[(t.task.id, t.sample)] for t in result
    ]
    assert set(seen) == set(temperatures.values())
    assert max(model.batches) == 4  # mixed temperatures still share a batch
    plain = rollout(env, TASKS[:1], Agent(model="fake"), BatchedFake(reply=oracle_reply))
    assert "temperature" not in plain[0].metadata


def explore_once(task, exploration):
    """Play ``task`` once with the oracle's replies; return the prompts and the episode."""
    prompts = []

    def reply(prompt, rng):
        prompts.append(prompt)
        return oracle_reply(prompt, rng)

    model = BatchedFake(reply=reply)
    (episode,) = rollout(env, [task], Agent(model="fake"), model, explore=lambda t, s: exploration)
    return prompts, episode


def test_an_episode_exploring_past_finish_is_offered_finish_only_after_its_calls():
    task = next(t for t in TASKS if len(env.oracle(t)) == 3)  # two calls, then finish
    prompts, result = explore_once(task, Exploration(0.9, min_calls=2))
    first, second, third = (p.allowed_tools for p in prompts)
    assert first and "finish" not in first and second == first
    assert third is None and result.passed
    assert result.metadata == {**result.metadata, "temperature": 0.9, "min_calls": 2}


def test_an_episode_exploring_a_first_tool_opens_with_that_tool_and_then_chooses_freely():
    task = TASKS[0]
    callable_tools = sorted(n for n in env.session(task).tools if n != "finish")
    opening = env.oracle(task)[0].name
    index = 2 * (callable_tools.index(opening) + len(callable_tools)) + 1  # odd: any; wraps
    prompts, result = explore_once(task, Exploration(first_tool=index))
    assert prompts[0].allowed_tools == (opening,)
    assert all(p.allowed_tools is None for p in prompts[1:]) and result.passed
    assert result.metadata["first_tool"] == opening
    plain = rollout(env, [task], Agent(model="fake"), BatchedFake(reply=oracle_reply))
    assert "first_tool" not in plain[0].metadata


def test_an_episode_exploring_a_last_tool_makes_its_last_call_before_finish_with_that_tool():
    task = next(t for t in TASKS if len(env.oracle(t)) == 3)  # two calls, then finish
    callable_tools = sorted(n for n in env.session(task).tools if n != "finish")
    ending = env.oracle(task)[1].name
    index = 2 * callable_tools.index(ending) + 1  # odd: any tool
    prompts, result = explore_once(task, Exploration(min_calls=2, last_tool=index))
    first, second, third = (p.allowed_tools for p in prompts)
    assert first and "finish" not in first and ending in first and len(first) > 1
    assert second == (ending,) and third is None and result.passed
    assert result.metadata["last_tool"] == ending and "first_tool" not in result.metadata
    # Without a call past the first to make, the last call before finish is the first.
    prompts, result = explore_once(task, Exploration(last_tool=index))
    assert prompts[0].allowed_tools == (ending,) and prompts[1].allowed_tools is None
    assert result.metadata["last_tool"] == ending


def test_a_first_tool_wins_where_it_and_a_last_tool_fall_on_the_first_call():
    task = TASKS[0]
    callable_tools = sorted(n for n in env.session(task).tools if n != "finish")
    opening = env.oracle(task)[0].name
    index = 2 * callable_tools.index(opening) + 1
    prompts, result = explore_once(task, Exploration(first_tool=index, last_tool=index + 2))
    assert prompts[0].allowed_tools == (opening,)
    assert result.metadata["first_tool"] == opening and "last_tool" not in result.metadata


def test_calls_to_tools_without_arguments_do_not_count_towards_the_calls_before_finish():
    task = grid.tasks("train", 1, seed=0, difficulty=2)[0]
    plan = grid.oracle(task)  # two actions, then finish
    callable_tools = sorted(n for n in grid.session(task).tools if n != "finish")
    prompts = []

    def reply(prompt, rng):
        prompts.append(prompt)
        step = sum(m["role"] == "tool" for m in prompt.messages)
        call = ToolCall("look", {}) if step == 0 else plan[step - 1]  # a look, then the plan
        return json.dumps({"name": call.name, "arguments": call.arguments})

    index = 2 * callable_tools.index(plan[1].name) + 1  # odd: any tool
    (episode,) = rollout(
        grid,
        [task],
        Agent(model="fake"),
        BatchedFake(reply=reply),
        explore=lambda t, s: Exploration(min_calls=2, last_tool=index),
    )
    looked, first, last, then = (p.allowed_tools for p in prompts)
    assert "finish" not in looked and first == looked  # the look left two acting calls
    assert last == (plan[1].name,) and then is None and episode.passed
    assert episode.metadata["last_tool"] == plan[1].name


def test_every_second_drawn_tool_is_one_the_task_names_by_its_verb():
    tools = dict.fromkeys(["delete_file", "list_files", "move_file", "read_file"], "A tool.")
    task = "In the workspace: Move a.log into logs/; delete b.tmp."
    assert {drawn_tool(tools, task, draw) for draw in range(0, 8, 2)} == {
        "delete_file",
        "move_file",
    }
    assert [drawn_tool(tools, task, draw) for draw in range(1, 9, 2)] == list(tools)
    assert [drawn_tool(tools, "What is 2 + 3?", draw) for draw in range(8)] == [
        tool for tool in tools for _ in range(2)
    ]


def test_a_drawn_tool_is_also_named_by_the_first_word_of_its_description():
    tools = {
        "look": "Describe the room.",
        "move": "Walk through a door.",
        "take": "Pick up an item.",
    }
    task = "Find the wood and pick it up."
    assert {drawn_tool(tools, task, draw) for draw in range(0, 8, 2)} == {"take"}
    assert {drawn_tool(tools, task, draw) for draw in range(1, 9, 2)} == set(tools)


def test_an_episode_skipping_repeats_never_calls_an_argument_free_tool_twice_in_a_row():
    task = grid.tasks("train", 1, difficulty=1)[0]
    allowed = []

    def looker(prompt, rng):  # looks whenever it may, else checks its inventory
        allowed.append(prompt.allowed_tools)
        name = "look" if prompt.allowed_tools is None or "look" in prompt.allowed_tools else ""
        return json.dumps({"name": name or "inventory", "arguments": {}})

    agent = Agent(model="fake", max_turns=4)
    (skipping,) = rollout(
        grid,
        [task],
        agent,
        BatchedFake(reply=looker),
        explore=lambda t, s: Exploration(skip_repeats=True),
    )
    assert [c.name for c in skipping.calls] == ["look", "inventory", "look", "inventory"]
    assert allowed[0] is None and "look" not in allowed[1] and "inventory" not in allowed[2]
    assert {"move", "finish"} <= set(allowed[1]) and skipping.metadata["skip_repeats"] is True
    (looping,) = rollout(
        grid, [task], agent, BatchedFake(reply=looker), explore=lambda t, s: Exploration()
    )
    assert [c.name for c in looping.calls] == ["look"] * 4


def test_an_episode_copying_its_arguments_is_offered_the_spans_of_its_conversation():
    task = TASKS[0]
    prompts, result = explore_once(task, Exploration(copy_arguments=True))
    spans = [p.copy_spans for p in prompts]
    numbers = [str(n) for n in [task.params["start"], *(b for _, b in task.params["steps"])]]
    assert all(number in spans[0] for number in numbers)
    first_result = result.steps[0].observation.text
    assert first_result in spans[1] and first_result not in spans[0]
    assert result.metadata["copy_arguments"] is True and result.passed
    assert all(p.once_spans == () for p in prompts)  # no spending, no limit
    plain = rollout(env, [task], Agent(model="fake"), BatchedFake(reply=oracle_reply))
    assert "copy_arguments" not in plain[0].metadata


def test_an_episode_spending_values_is_never_offered_one_an_earlier_call_passed():
    task = TASKS[3]  # (((19 * 8) + 50) * 7) + 7: four calls, the 7 passed twice
    exploration = Exploration(copy_arguments=True, chain=True, fresh=True)
    prompts, result = explore_once(task, exploration)
    first_call = env.oracle(task)[0]
    spent = {str(v) for v in first_call.arguments.values()}
    assert spent <= set(prompts[0].copy_spans or ())
    assert not spent & set(prompts[1].copy_spans or ())
    assert result.steps[0].observation.text in (prompts[1].copy_spans or ())
    assert "7" in (prompts[3].copy_spans or ())  # given twice, passed once so far
    # Values left once are marked, so a chained call passes the result in one argument only.
    assert result.steps[0].observation.text in prompts[1].once_spans
    assert "7" not in prompts[0].once_spans and "7" in prompts[3].once_spans
    assert result.passed and result.metadata["fresh"] is True  # the oracle's plan still fits


def test_an_episode_chaining_its_calls_takes_up_each_successful_result():
    task = next(t for t in TASKS if len(env.oracle(t)) == 3)  # two calls, then finish
    prompts, result = explore_once(task, Exploration(copy_arguments=True, chain=True))
    chains = [p.chain_spans for p in prompts]
    assert chains[0] is None  # nothing to take up before the first result
    for step, chain in zip(result.steps, chains[1:], strict=False):
        assert step.observation.text in (chain or ())
    assert result.metadata["chain"] is True and result.passed
    (unchained,) = rollout(
        env,
        [task],
        Agent(model="fake"),
        BatchedFake(reply=oracle_reply),
        explore=lambda t, s: Exploration(chain=True),  # no copying, no chaining
    )
    assert "chain" not in unchained.metadata
