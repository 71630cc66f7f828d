import json

from ratchet.core.agent import Agent
from ratchet.core.memory import Skill, SkillStep
from ratchet.core.serialise import from_json, to_json
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory, tool_steps
from ratchet.engine.harness import run_episode
from ratchet.engine.models.base import Completion
from ratchet.engine.skills import offer, play_call
from ratchet.envs.calc import env

ADD_THEN_FINISH = Skill(
    name="add_then_finish",
    description="Runs add(a, b), then finish with its result.",
    env="calc",
    parameters={"a": {"type": "number"}, "b": {"type": "number"}},
    steps=(
        SkillStep("add", {"a": {"param": "a"}, "b": {"param": "b"}}),
        SkillStep("finish", {"answer": {"result": 0}}),
    ),
)
DIVIDE_THEN_FINISH = Skill(
    name="divide_then_finish",
    description="Runs divide(a, b), then finish with its result.",
    env="calc",
    parameters={"a": {"type": "number"}, "b": {"type": "number"}},
    steps=(
        SkillStep("divide", {"a": {"param": "a"}, "b": {"param": "b"}}),
        SkillStep("finish", {"answer": {"result": 0}}),
    ),
)


def task_with(op):
    return next(t for t in env.tasks("train", 40, difficulty=1) if t.params["steps"][0][0] == op)


def scripted(*calls):
    def policy(prompt, turn):
        policy.prompts.append(prompt)
        if turn >= len(calls):
            return Completion("", error="out of calls")
        return Completion(json.dumps(calls[turn]))

    policy.prompts = []
    return policy


def test_skills_are_offered_only_when_runnable_and_named_uniquely():
    tools = ({"type": "function", "function": {"name": n}} for n in ("add", "finish"))
    clash = Skill("add", "", "calc", {}, (SkillStep("add", {}),))
    foreign = Skill("lookup_then_finish", "", "calc", {}, (SkillStep("lookup", {}),))
    offered, runnable = offer(tuple(tools), [ADD_THEN_FINISH, clash, foreign, ADD_THEN_FINISH])
    assert [t["function"]["name"] for t in offered] == ["add", "finish", "add_then_finish"]
    assert list(runnable) == ["add_then_finish"]


def test_a_skill_call_runs_its_steps_and_the_episode_records_both():
    task = task_with("add")
    a, (_, b) = task.params["start"], task.params["steps"][0]
    policy = scripted({"name": "add_then_finish", "arguments": {"a": a, "b": b}})
    agent = Agent(model="fake")
    trajectory = run_episode(env, task, agent, policy, skills=(ADD_THEN_FINISH,))
    assert trajectory.passed and len(trajectory.steps) == 1
    tools = [t["function"]["name"] for t in policy.prompts[0].tools]
    assert "add_then_finish" in tools and "add_then_finish" in str(trajectory.tools)
    step = trajectory.steps[0]
    assert step.call.name == "add_then_finish"
    assert [s.call.name for s in step.substeps] == ["add", "finish"]
    assert step.substeps[1].call.arguments == {"answer": str(task.params["answer"])}
    assert [s.call.name for s in tool_steps(trajectory.steps)] == ["add", "finish"]
    assert trajectory.messages[2]["tool_calls"][0]["function"]["name"] == "add_then_finish"
    assert from_json(Trajectory, to_json(trajectory)) == trajectory  # stored as it happened


def test_a_failing_step_stops_the_skill_cleanly_and_the_episode_goes_on():
    task = task_with("add")
    policy = scripted(
        {"name": "divide_then_finish", "arguments": {"a": 4, "b": 0}},
        {"name": "divide_then_finish", "arguments": {"a": 4}},
        {"name": "finish", "arguments": {"answer": "0"}},
    )
    trajectory = run_episode(env, task, Agent(model="fake"), policy, skills=(DIVIDE_THEN_FINISH,))
    first, second, third = trajectory.steps
    assert "stopped at step 1 (divide)" in first.observation.text and first.failed
    assert [s.call.name for s in first.substeps] == ["divide"] and first.substeps[0].failed
    assert "bad arguments for divide_then_finish" in second.observation.text
    assert second.substeps == ()
    assert third.call.name == "finish" and trajectory.terminated


def test_results_can_be_read_as_json_fields():
    class Session:
        def __init__(self):
            self.calls = []

        def step(self, call):
            from ratchet.core.trajectory import Observation

            self.calls.append(call)
            if call.name == "lookup":
                return Observation(json.dumps({"id": "C7", "name": "x"}))
            return Observation(f"orders of {call.arguments['customer']}")

    skill = Skill(
        "lookup_then_orders",
        "",
        "shop",
        {"email": {"type": "string"}},
        (
            SkillStep("lookup", {"email": {"param": "email"}}),
            SkillStep("orders", {"customer": {"result": 0, "field": "id"}}),
        ),
    )
    session = Session()
    observation, steps = play_call(
        session, ToolCall("lookup_then_orders", {"email": "a@b"}), {skill.name: skill}
    )
    assert session.calls[1].arguments == {"customer": "C7"}
    assert observation.text.endswith("orders of C7") and len(steps) == 2
