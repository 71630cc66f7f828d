import json
from dataclasses import replace

import pytest

from ratchet.core.agent import Agent, load_agent
from ratchet.core.memory import SkillStep, select_skills
from ratchet.engine.harness import replay
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.calc import env
from ratchet.improve.levers import LeverContext, NoCandidate
from ratchet.improve.levers import skills as skills_module
from ratchet.improve.levers.skills import SkillLever, check_skill, merge, mine

TASKS = env.tasks("train", 16, difficulty=1)


def successes():
    return [replay(env, t, env.oracle(t)) for t in TASKS]


def context(experience, tmp_path, incumbent=None):
    return LeverContext(
        env=env,
        incumbent=incumbent or Agent(model="fake"),
        experience=experience,
        model=None,
        reflector=None,
        trainer=None,
        workdir=tmp_path,
        version="v1",
    )


def by_name(skills):
    return {skill.name: skill for skill in skills}


def test_mining_abstracts_constants_into_parameters_and_results_into_references():
    mined = by_name(mine(successes()))
    add = mined["add_then_finish"]
    assert add.tools == ("add", "finish")
    assert add.steps[0].arguments == {"a": {"param": "a"}, "b": {"param": "b"}}
    assert add.steps[1].arguments == {"answer": {"result": 0}}
    assert add.parameters["a"]["type"] == "number" and "add" in add.parameters["a"]["description"]
    assert add.support == sum(t.params["steps"][0][0] == "add" for t in TASKS)


def test_a_value_shared_by_every_instance_stays_fixed():
    # Three episodes that all add 5: the 5 is part of the procedure, not a parameter.
    tasks = [t for t in env.tasks("train", 400, difficulty=1) if t.params["steps"][0] == ["add", 5]]
    mined = by_name(mine([replay(env, t, env.oracle(t)) for t in tasks[:3]]))
    assert mined["add_then_finish"].steps[0].arguments["b"] == {"value": 5}
    assert list(mined["add_then_finish"].parameters) == ["a"]


def test_a_skill_is_admitted_only_if_it_executes_on_the_run_s_verified_episodes(
    tmp_path, monkeypatch
):
    good = by_name(mine(successes()))["add_then_finish"]
    # Same procedure, but finish gets the result parsed as a number: the finish tool wants
    # text, so every step of the skill would be right except the one that fails.
    broken = replace(
        good,
        name="add_then_finish_broken",
        steps=(good.steps[0], SkillStep("finish", {"answer": {"result": 0, "json": True}})),
    )
    passed, tried = check_skill(env, broken, successes(), checks=3)
    assert tried == 3 and passed == 0
    assert check_skill(env, good, successes(), checks=3) == (3, 3)
    monkeypatch.setattr(skills_module, "mine", lambda *args: [broken, good])
    candidate = SkillLever().propose(context(successes(), tmp_path))
    assert candidate is not None and candidate.lever == "skills"
    assert [s.name for s in candidate.skills] == ["add_then_finish"]
    assert candidate.notes["skills_rejected"] == ["add_then_finish_broken: 0/4 verified episodes"]


def test_admitting_skills_never_asks_the_oracle(tmp_path):
    def no_oracle(task):
        raise AssertionError("the oracle was asked")

    own = successes()  # the run's episodes, played before the oracle goes away
    blind = replace(env, oracle=no_oracle)
    lever_context = replace(context(own, tmp_path), env=blind)
    candidate = SkillLever().propose(lever_context)
    assert candidate is not None and "add_then_finish" in [s.name for s in candidate.skills]
    # An episode's own calls with the skill in place of the part it matches, replayed.
    assert check_skill(blind, by_name(candidate.skills)["add_then_finish"], own, 2) == (2, 2)


def test_the_lever_saves_skills_as_data_and_the_agent_calls_them_as_tools(tmp_path):
    candidate = SkillLever().propose(context(successes(), tmp_path))
    assert candidate is not None and len(candidate.skills) <= SkillLever().max_skills
    names = [s.name for s in candidate.skills]
    assert len(set(names)) == len(names) and "add_then_finish" in names
    reloaded, _ = load_agent(str(candidate.save(tmp_path / "v1")))
    assert reloaded.skills == candidate.skills
    saved = json.loads((tmp_path / "v1" / "agent.json").read_text())
    assert saved["skills"][0]["steps"][0]["tool"]  # plain JSON data, no code

    def reply(prompt, rng):
        offered = [t["function"]["name"] for t in prompt.tools]
        task = next(m["content"] for m in prompt.messages if m["role"] == "user")
        a, b = (int(n) for n in task.removeprefix("Compute ").rstrip(".").split(" + "))
        assert "add_then_finish" in offered
        return json.dumps({"name": "add_then_finish", "arguments": {"a": a, "b": b}})

    sums = [t for t in env.tasks("test", 40, difficulty=1) if t.instruction.startswith("Compute")]
    sums = [t for t in sums if " + " in t.instruction][:3]
    played = rollout(env, sums, candidate, FakeModel(reply=reply), RolloutConfig(concurrency=2))
    assert all(t.passed for t in played)
    assert all([s.call.name for s in t.steps[0].substeps] == ["add", "finish"] for t in played)


def test_known_skills_give_no_new_candidate_and_the_pool_is_capped(tmp_path):
    first = SkillLever().propose(context(successes(), tmp_path))
    with pytest.raises(NoCandidate, match="no skill admitted") as refused:
        SkillLever().propose(context(successes(), tmp_path, incumbent=first))
    assert not any(f"{skill.name}:" in str(refused.value) for skill in first.skills)
    capped = merge(first.skills, (), limit=2)
    assert len(capped) == 2 and capped[0].support >= capped[1].support
    twin = replace(capped[1], name=capped[0].name, steps=capped[0].steps[:1])
    assert [s.name for s in merge(capped, [twin], 3)][-1] == f"{capped[0].name}_2"


def test_retrieval_prefers_skills_whose_examples_read_like_the_task_in_its_env(tmp_path):
    mined = mine(successes())
    word = next(t for t in env.tasks("test", 20, difficulty=1) if t.family == "word")
    expressions = [replace(s, examples=("Compute 3 + 4.",)) for s in mined[:3]]
    story = replace(mined[3], examples=(word.instruction.replace("has", "had"),))
    assert select_skills([*expressions, story], word, 2)[0] == story
    assert select_skills([replace(s, env="shop") for s in mined], word, 4) == ()
