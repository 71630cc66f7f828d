from dataclasses import replace

import pytest

from fakes import FakeTrainer, lever_context
from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.improve.levers import NoCandidate
from ratchet.improve.levers.pairs import PairsLever, groups, mine_pairs, parting

TASK = env.tasks("train", 1, difficulty=2)[0]
ORACLE = env.oracle(TASK)  # two operations, then finish


def play(calls, agent="base", sample=0, task=TASK):
    return replace(replay(env, task, calls, Agent(version=agent)), agent=agent, sample=sample)


def wrong_finish():
    return ToolCall("finish", {"answer": "-1"})


def context(experience, tmp_path, trainer=None, incumbent=None, incumbent_dir=None):
    incumbent = incumbent or Agent(model="local")
    return lever_context(
        experience,
        tmp_path,
        trainer=trainer,
        incumbent=incumbent,
        incumbent_dir=incumbent_dir,
        seed=3,
    )


def test_the_pair_is_taken_where_a_success_and_a_failure_part():
    success = play(ORACLE)
    failure = play([*ORACLE[:1], wrong_finish()], sample=1)
    assert success.passed and not failure.passed
    pair = parting(success, failure)
    assert pair is not None and pair.turn == 1 and pair.task_id == TASK.id
    # The prompt is the conversation up to the state: system, task, first call and its result.
    assert [m["role"] for m in pair.messages] == ["system", "user", "assistant", "tool"]
    assert pair.messages == success.messages[:4] == failure.messages[:4]
    assert pair.chosen["tool_calls"][0]["function"]["name"] == ORACLE[1].name
    assert pair.rejected["tool_calls"][0]["function"]["name"] == "finish"


def test_no_pair_where_the_samples_never_part_or_saw_different_worlds():
    success = play(ORACLE)
    assert parting(success, play(ORACLE[:1], sample=1)) is None  # stopped before parting
    different = replace(
        play([*ORACLE[:1], wrong_finish()], sample=1),
        steps=(
            replace(
                play(ORACLE).steps[0], observation=replace(success.steps[0].observation, text="?")
            ),
            *play([*ORACLE[:1], wrong_finish()]).steps[1:],
        ),
    )
    assert parting(success, different) is None


def test_pairs_come_only_from_groups_with_both_outcomes_and_are_distinct():
    other = env.tasks("train", 2, difficulty=1)[1]
    experience = [
        play(ORACLE),
        play(ORACLE, sample=1),
        play([wrong_finish()], sample=2),
        play([wrong_finish()], sample=3),  # the same rejected action again: one pair
        play([wrong_finish()], task=other),
        play([wrong_finish()], task=other, sample=1),  # all failed: no pair
    ]
    pairs = mine_pairs(groups(experience), limit=10)
    assert len(pairs) == 1 and pairs[0].turn == 0 and pairs[0].task_id == TASK.id
    assert mine_pairs(groups(experience), limit=0) == []


def test_the_lever_trains_dpo_from_the_incumbents_adapter(tmp_path):
    trainer = FakeTrainer()
    relabel = replace(play(ORACLE, sample=5), metadata={"hindsight": True})
    experience = [play(ORACLE), play([wrong_finish()], sample=1), relabel]
    incumbent = Agent(version="v3", model="local", adapter="adapter")
    lever = PairsLever(steps=7, beta=0.3, chosen_nll_weight=0.5, learning_rate=1e-4)
    candidate = lever.propose(
        context(experience, tmp_path, trainer, incumbent, tmp_path / "agents" / "v3")
    )
    assert candidate is not None and candidate.lever == "pairs" and candidate.parent == "v3"
    assert candidate.adapter == "adapter" and (tmp_path / "adapter" / "skill.json").exists()
    call = trainer.calls[-1]
    assert call["method"] == "dpo" and len(call["data"]) == 1
    assert call["start"] == tmp_path / "agents" / "v3" / "adapter"
    settings = call["settings"]
    assert (settings.steps, settings.beta, settings.chosen_nll_weight) == (7, 0.3, 0.5)
    assert candidate.notes["pairs"] == 1 and candidate.notes["beta"] == 0.3
    assert candidate.notes["chosen_nll_weight"] == 0.5


def test_verified_episodes_anchor_the_pairs_when_weighted(tmp_path):
    level_one = env.tasks("train", 1, difficulty=1)[0]
    mastered = play(env.oracle(level_one), task=level_one)
    relabel = replace(play(ORACLE, sample=5), metadata={"hindsight": True})
    failure = play([wrong_finish()], sample=1)
    experience = [mastered, play(ORACLE), failure, relabel]
    trainer = FakeTrainer()
    candidate = PairsLever(anchor_weight=0.5).propose(context(experience, tmp_path, trainer))
    call = trainer.calls[-1]
    assert len(call["data"]) == 1 and call["settings"].anchor_weight == 0.5
    # Every verified episode anchors, the mastered level-1 one and the relabel included.
    success = experience[1]
    assert call["anchors"] == [mastered, success, relabel]
    assert candidate is not None and candidate.notes["anchors"] == 3
    PairsLever().propose(context(experience, tmp_path, trainer))
    assert trainer.calls[-1]["anchors"] == [] and trainer.calls[-1]["settings"].anchor_weight == 0


def test_no_pairs_no_candidate_and_no_trainer_is_an_error(tmp_path):
    only_failures = [play([wrong_finish()]), play([wrong_finish()], sample=1)]
    with pytest.raises(NoCandidate, match="no task with a success and a failure"):
        PairsLever().propose(context(only_failures, tmp_path, FakeTrainer()))
    with pytest.raises(ValueError, match="pairs lever cannot train"):
        PairsLever().propose(context(only_failures, tmp_path))
