import json

import pytest

from ratchet.core.agent import Agent
from ratchet.engine.context import ELIDED, Context, ContextPolicy
from ratchet.engine.harness import Budget, system_message
from ratchet.engine.models.base import Prompt
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.grid import env as grid


def words(prompt: Prompt) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in prompt.messages)


SYSTEM = {"role": "system", "content": "be brief"}
TASK = {"role": "user", "content": "find the key"}
DEMO = [{"role": "user", "content": "demo task " * 5}, {"role": "assistant", "content": "done"}]


def turns(n: int, result_words: int = 20) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = []
    for i in range(n):
        messages.append({"role": "assistant", "content": f"call {i}"})
        messages.append({"role": "tool", "content": " ".join([f"value{i}"] * result_words)})
    return messages


def fit(window: int, conversation: list[dict[str, object]], keep: int = 2):
    context = Context(window, 10, words, ContextPolicy(keep_turns=keep))
    return context.fit(SYSTEM, DEMO, conversation, ())


def test_a_conversation_that_fits_is_sent_whole() -> None:
    fitted = fit(1000, [TASK, *turns(3)])
    assert fitted.trim == {}
    assert fitted.prompt is not None and len(fitted.prompt.messages) == 1 + 2 + 1 + 6


def test_old_results_are_elided_first_and_recent_turns_kept() -> None:
    fitted = fit(10 + 120, [TASK, *turns(6)], keep=2)
    assert fitted.prompt is not None and words(fitted.prompt) <= 120
    results = [m["content"] for m in fitted.prompt.messages if m["role"] == "tool"]
    assert len(results) == 6 and results[-2:] == [" ".join([f"value{i}"] * 20) for i in (4, 5)]
    assert results[0] == ELIDED.format(chars=len(" ".join(["value0"] * 20)))
    assert fitted.trim["elided"] >= 1 and fitted.trim["omitted"] == 0
    assert fitted.trim["demonstrations"] == 0


def test_then_demonstrations_then_whole_turns_go_and_a_note_says_so() -> None:
    fitted = fit(10 + 60, [TASK, *turns(6)], keep=2)
    assert fitted.prompt is not None and words(fitted.prompt) <= 60
    messages = fitted.prompt.messages
    assert messages[0] == SYSTEM and messages[1] == TASK  # no demonstrations any more
    assert "earlier turn(s) omitted" in str(messages[2]["content"])
    assert messages[-1]["content"] == " ".join(["value5"] * 20)  # the last turn is kept
    assert fitted.trim["demonstrations"] == 2 and fitted.trim["omitted"] >= 1


def test_nothing_is_sent_when_even_the_task_and_last_turn_do_not_fit() -> None:
    fitted = fit(10 + 5, [TASK, *turns(2)])
    assert fitted.prompt is None and fitted.trim["fitted"] > 5


def test_keep_turns_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="keep_turns"):
        ContextPolicy(keep_turns=-1)


LOOK = json.dumps({"name": "look", "arguments": {}})


def first_prompt_words(model: FakeModel, agent: Agent) -> int:
    observation = grid.session(TASKS[0]).reset()
    user = {"role": "user", "content": observation.text}
    return model.count_tokens(Prompt((system_message(agent), user)))


TASKS = grid.tasks("test", 2, seed=1, difficulty=1)


def test_a_tiny_window_trims_long_episodes_and_never_gets_an_oversized_prompt() -> None:
    agent = Agent(model="fake")
    model = FakeModel(script=[LOOK])
    window = first_prompt_words(model, agent) + 20 + 70
    model.context_window = window  # the fake answers an oversized prompt with an error
    budget = Budget(max_turns=12, max_episode_tokens=10_000, timeout_s=60)
    config = RolloutConfig(2, 20, budget, ContextPolicy(keep_turns=2))
    played = rollout(grid, TASKS[:1], agent, model, config)
    trajectory = played[0]
    assert trajectory.error is None and len(trajectory.steps) == 12
    assert max(s.prompt_tokens for s in trajectory.steps) <= window - 20
    assert len(trajectory.messages) == 2 + 2 * 12  # the record keeps the whole conversation
    context = trajectory.metadata["context"]
    assert context["window"] == window and context["keep_turns"] == 2
    assert any(t["elided"] for t in context["trims"]) and any(
        t["omitted"] for t in context["trims"]
    )


def test_an_episode_whose_task_cannot_fit_ends_truncated_without_a_model_call() -> None:
    agent = Agent(model="fake")
    model = FakeModel(script=[LOOK])
    model.context_window = first_prompt_words(model, agent)  # no room left for the reply
    played = rollout(grid, TASKS[:1], agent, model, RolloutConfig(1, 20))
    trajectory = played[0]
    assert model.calls == 0 and trajectory.truncated and not trajectory.steps
    assert trajectory.verdict is not None and trajectory.error is None
    assert trajectory.metadata["context"]["trims"][0]["turn"] == 0


def test_served_models_declare_a_generous_window_and_estimate_tokens() -> None:
    from ratchet.engine.models.base import WindowedModel, estimate_tokens
    from ratchet.engine.models.openai import OpenAIModel

    served = OpenAIModel("some-model", base_url="http://127.0.0.1:9/v1", context_window=8192)
    assert isinstance(served, WindowedModel) and served.context_window == 8192
    assert OpenAIModel("m", base_url="http://127.0.0.1:9/v1").context_window == 131_072
    prompt = Prompt(({"role": "user", "content": "word " * 300},))
    assert served.count_tokens(prompt) == estimate_tokens(prompt) >= 300
