from dataclasses import replace

import pytest

from fakes import FakeTrainer, lever_context
from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.improve.levers import NoCandidate
from ratchet.improve.levers.grpo import GrpoLever, advantages, scored_groups
from ratchet.improve.levers.pairs import groups

TASKS = env.tasks("train", 3, difficulty=1)


def play(task, passed, agent="base", sample=0, score=None):
    calls = env.oracle(task) if passed else [ToolCall("finish", {"answer": "-1"})]
    episode = replace(replay(env, task, calls), agent=agent, sample=sample)
    if score is not None:
        episode = replace(episode, verdict=Verdict(score=score, passed=False))
    return episode


def test_advantages_are_group_relative_and_equal_groups_say_nothing():
    group = [play(TASKS[0], True), play(TASKS[0], False, sample=1)]
    assert advantages(group) == [1.0, -1.0]
    assert advantages([play(TASKS[0], False), play(TASKS[0], False, sample=1)]) is None
    assert advantages([play(TASKS[0], True)]) is None
    partial = [play(TASKS[0], False, score=s, sample=i) for i, s in enumerate([0.0, 0.5, 1.0])]
    relative = advantages(partial)
    assert relative is not None and relative[1] == 0.0 and relative[0] == -relative[2] < 0


def test_all_equal_groups_are_skipped():
    experience = [
        play(TASKS[0], True),
        play(TASKS[0], False, sample=1),
        play(TASKS[1], True),
        play(TASKS[1], True, sample=1),  # all passed
        play(TASKS[2], False),
        play(TASKS[2], False, sample=1),  # all failed
    ]
    scored = scored_groups(groups(experience), limit=100)
    assert {s.trajectory.task.id for s in scored} == {TASKS[0].id}
    assert sorted(s.advantage for s in scored) == [-1.0, 1.0]


def test_the_lever_uses_only_the_incumbents_own_samples(tmp_path):
    trainer = FakeTrainer()
    experience = [
        play(TASKS[0], True, agent="base"),
        play(TASKS[0], False, agent="base", sample=1),
        play(TASKS[1], True, agent="v2"),
        play(TASKS[1], False, agent="v2", sample=1),
    ]
    incumbent = Agent(version="v2", model="local", adapter="adapter")
    context = lever_context(
        experience, tmp_path, trainer=trainer, incumbent=incumbent, incumbent_dir=tmp_path / "v2"
    )
    candidate = GrpoLever(beta=0.01, clip=0.3).propose(context)
    assert candidate is not None and candidate.adapter == "adapter"
    call = trainer.calls[-1]
    assert call["method"] == "grpo" and call["start"] == tmp_path / "v2" / "adapter"
    assert {s.trajectory.agent for s in call["data"]} == {"v2"}
    assert (call["settings"].beta, call["settings"].clip) == (0.01, 0.3)
    assert candidate.notes["groups"] == 1


def test_nothing_informative_no_candidate(tmp_path):
    failures = [play(TASKS[0], False), play(TASKS[0], False, sample=1)]
    context = lever_context(failures, tmp_path, trainer=FakeTrainer())
    with pytest.raises(NoCandidate, match="scored differently"):
        GrpoLever().propose(context)
    with pytest.raises(ValueError, match="grpo lever cannot train"):
        GrpoLever().propose(replace(context, trainer=None))
