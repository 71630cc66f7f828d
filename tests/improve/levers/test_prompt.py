import json

import pytest

from fakes import solve_calc
from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig
from ratchet.envs.calc import env
from ratchet.improve.levers import LeverContext, NoCandidate, make_play
from ratchet.improve.levers.insights import specific_values
from ratchet.improve.levers.prompt import PromptLever, RatchetAdapter

TASKS = env.tasks("train", 16, difficulty=1)
GOOD = "Compute carefully with the tools, then call finish with the result."


def failures():
    return [replay(env, t, [ToolCall("finish", {"answer": "0"})]) for t in TASKS]


def careful_model():
    """Solves a task only when its system message asks it to be careful."""

    def reply(prompt, rng):
        careful = "carefully" in prompt.messages[0]["content"]
        task = [m["content"] for m in prompt.messages if m["role"] == "user"][-1]
        answer = solve_calc(task) if careful else -1
        return json.dumps({"name": "finish", "arguments": {"answer": str(answer)}})

    return FakeModel(reply=reply)


def rewriting(text):
    return FakeModel(script=[json.dumps({"name": "rewrite", "arguments": {"text": text}})])


def context(tmp_path, reflector, recorded=None):
    model = careful_model()
    sink = recorded.extend if recorded is not None else None
    return LeverContext(
        env=env,
        incumbent=Agent(model="fake"),
        experience=failures(),
        model=model,
        reflector=reflector,
        trainer=None,
        workdir=tmp_path,
        version="v1",
        play=make_play(env, model, RolloutConfig(concurrency=4), record=sink, label="prompt"),
    )


def test_a_reflected_rewrite_that_does_better_on_training_tasks_is_proposed(tmp_path):
    recorded = []
    candidate = PromptLever(budget=40).propose(context(tmp_path, rewriting(GOOD), recorded))
    assert candidate is not None and candidate.lever == "prompt"
    assert candidate.system_prompt == GOOD or candidate.guidance == {"calc": GOOD}
    assert candidate.notes["front_scores"][0] < max(candidate.notes["front_scores"])
    assert recorded and all(t.task.split == "train" for t in recorded)


def test_a_rewrite_that_copies_task_values_is_rejected(tmp_path):
    number = str(TASKS[0].params["start"] if TASKS[0].params["start"] > 9 else 42)
    copying = f"Compute carefully: the answer is often {number}, so call finish with it."
    lever_context = context(tmp_path, rewriting(copying))
    assert number in specific_values(lever_context.experience)
    with pytest.raises(NoCandidate, match="none beat"):
        PromptLever(budget=20).propose(lever_context)
    adapter = RatchetAdapter(PromptLever(), lever_context, rewriting(copying), {number})
    assert adapter.check(copying, "You solve tasks.") == "copies task values"
    assert adapter.check(GOOD, "You solve tasks.") is None
    assert adapter.check("x" * 5000, "You solve tasks.") == "too long"
    texts = adapter.propose_new_texts({"system_prompt": "You solve tasks."}, {}, ["system_prompt"])
    assert texts == {} and adapter.rejected == {"copies task values": 1}


def test_the_reflection_prompt_stays_within_its_cap(tmp_path):
    lever = PromptLever(max_reflection_chars=3000, max_prompt_chars=800)
    adapter = RatchetAdapter(lever, context(tmp_path, rewriting(GOOD)), rewriting(GOOD), set())
    records = [{"Episode": "call " * 400, "Feedback": "failed: " + "no " * 200}] * 50
    prompt = adapter.reflection_prompt("system_prompt", "long prompt " * 1000, records)
    user = prompt.messages[1]["content"]
    assert len(user) <= 3000 and "1. call" in user
    assert prompt.tools[0]["function"]["parameters"]["properties"]["text"]["maxLength"] == 800


def test_nothing_to_reflect_with_gives_no_candidate(tmp_path):
    junk = FakeModel(script=["no tool call here"])
    with pytest.raises(NoCandidate, match="none beat"):
        PromptLever(budget=20).propose(context(tmp_path, junk))
