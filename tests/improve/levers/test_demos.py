import json
from dataclasses import replace

import pytest

from fakes import FakeTrainer, lever_context, skilled_model
from ratchet.core.pool import TaskPool
from ratchet.core.task import TaskSpec
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.engine.export import write_jsonl
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.improve.levers import NoCandidate
from ratchet.improve.levers.demos import DEMOS_FILE, DemosLever, admissible

TRAIN = env.tasks("train", 6, difficulty=1)
PROBE = env.tasks("probe", 3, difficulty=1)
TEST = env.tasks("test", 3, difficulty=1)


def failed(task):
    return replay(env, task, [ToolCall("finish", {"answer": "-1"})])


def forged(task):
    """A probe or test task relabelled as train: only its problem key tells."""
    return replace(task, split="train")


def context(experience, tmp_path, trainer=None, reflector=None):
    return lever_context(experience, tmp_path, trainer=trainer, reflector=reflector)


def test_only_train_problems_are_admissible_whatever_the_split_says():
    assert all(admissible(env, t) for t in TRAIN)
    assert not any(admissible(env, t) for t in PROBE + TEST)
    assert not any(admissible(env, forged(t)) for t in PROBE + TEST)


def test_a_fixed_pool_s_test_problem_is_not_admissible_whatever_its_key_hashes_to():
    def spec(task):
        return TaskSpec(task.instruction, task.params, task.family, task.difficulty)

    # A benchmark's own split: train-hashed problems in its test split.
    pool_env = replace(env, sample=TaskPool(train=[spec(t) for t in PROBE], test=[spec(TRAIN[0])]))
    held = pool_env.tasks("test", 1)[0]
    assert held.params == TRAIN[0].params and not admissible(pool_env, forged(held))
    assert all(admissible(pool_env, t) for t in pool_env.tasks("train", 3))


def test_oracle_demos_are_verified_train_only_and_marked_privileged(tmp_path):
    trainer = FakeTrainer()
    experience = [failed(t) for t in TRAIN] + [failed(forged(t)) for t in PROBE + TEST]
    own = replay(env, TRAIN[0], env.oracle(TRAIN[0]))
    candidate = DemosLever(steps=5).propose(context([*experience, own], tmp_path, trainer))
    assert candidate is not None and candidate.lever == "demos"
    assert candidate.notes["privileged"] == {"source": "oracle", "demos": 6, "file": DEMOS_FILE}
    trained = trainer.calls[-1]["data"]
    assert len(trained) == 7  # six demonstrations and the agent's own success
    assert all(t.passed for t in trained)
    held_out = {t.id for t in PROBE + TEST}
    assert not any(t.task.id in held_out for t in trained)
    lines = (tmp_path / DEMOS_FILE).read_text().splitlines()
    assert {json.loads(line)["task_id"] for line in lines} == {t.id for t in TRAIN}
    assert {json.loads(line)["agent"] for line in lines} == {"oracle"}


def test_imported_demos_are_replayed_and_held_out_problems_never_used(tmp_path):
    good = [replay(env, t, env.oracle(t)) for t in TRAIN[:3]]
    leaked = [replay(env, t, env.oracle(t)) for t in PROBE + TEST]
    leaked += [replace(e, task=forged(e.task)) for e in leaked]
    lying = replace(failed(TRAIN[3]), verdict=Verdict.of(True))  # claims a pass it never had
    path = tmp_path / "demos.jsonl"
    write_jsonl([*good, *leaked, lying], path)
    trainer = FakeTrainer()
    workdir = tmp_path / "work"
    workdir.mkdir()
    lever = DemosLever(source=str(path), with_own=False)
    candidate = lever.propose(context([failed(t) for t in TRAIN], workdir, trainer))
    assert candidate is not None
    trained = trainer.calls[-1]["data"]
    assert sorted(t.task.id for t in trained) == sorted(t.id for t in TRAIN[:3])
    assert candidate.notes["privileged"]["source"] == str(path)


def test_teacher_demos_need_a_teacher_and_come_from_it(tmp_path):
    experience = [failed(t) for t in TRAIN]
    with pytest.raises(ValueError, match="--reflector"):
        DemosLever(source="teacher").propose(context(experience, tmp_path, FakeTrainer()))
    trainer = FakeTrainer()
    teacher = skilled_model(1.0)
    candidate = DemosLever(source="teacher").propose(
        context(experience, tmp_path, trainer, reflector=teacher)
    )
    assert candidate is not None and candidate.notes["privileged"]["demos"] == len(TRAIN)
    assert {t.agent for t in trainer.calls[-1]["data"]} == {"teacher"}


def test_a_missing_source_is_a_clear_error_and_no_demo_no_candidate(tmp_path):
    with pytest.raises(ValueError, match="neither oracle nor teacher nor a JSONL file"):
        DemosLever(source=str(tmp_path / "nope.jsonl")).propose(
            context([failed(TRAIN[0])], tmp_path, FakeTrainer())
        )
    with pytest.raises(NoCandidate, match="no passing demonstration"):
        DemosLever().propose(context([], tmp_path, FakeTrainer()))
