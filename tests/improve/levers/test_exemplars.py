import pytest

from fakes import learning_model
from ratchet.core.agent import Agent
from ratchet.engine.harness import replay
from ratchet.engine.rollout import rollout
from ratchet.envs.calc import env
from ratchet.improve.gate import GateConfig, decide_round
from ratchet.improve.levers import LeverContext, NoCandidate
from ratchet.improve.levers.exemplars import ExemplarLever

TRAIN = env.tasks("train", 30, difficulty=1)
PROBE = env.tasks("probe", 30, difficulty=1)


def context(experience, incumbent=None, tmp_path=None):
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


def successes():
    return [replay(env, t, env.oracle(t)) for t in TRAIN[:10]]


def test_the_pool_holds_verified_successes_only(tmp_path):
    failed = [replay(env, t, []) for t in TRAIN[10:20]]
    candidate = ExemplarLever().propose(context([*successes(), *failed], tmp_path=tmp_path))
    assert candidate is not None
    assert (
        candidate.version == "v1" and candidate.parent == "base" and candidate.lever == "exemplars"
    )
    assert {e.instruction for e in candidate.exemplars} == {t.instruction for t in TRAIN[:10]}
    first = candidate.exemplars[0]
    assert first.turns[0]["role"] == "assistant" and first.turns[-1]["role"] == "tool"


def test_nothing_new_means_no_candidate(tmp_path):
    with pytest.raises(NoCandidate, match="no verified error-free success"):
        ExemplarLever().propose(context([replay(env, TRAIN[0], [])], tmp_path=tmp_path))
    candidate = ExemplarLever().propose(context(successes(), tmp_path=tmp_path))
    with pytest.raises(NoCandidate, match="already an exemplar"):
        ExemplarLever().propose(context(successes(), candidate, tmp_path))


def test_demonstrations_do_not_lower_the_toy_score(tmp_path):
    base = Agent(model="fake")
    candidate = ExemplarLever().propose(context(successes(), base, tmp_path))
    assert candidate is not None
    before = rollout(env, PROBE, base, learning_model(seed=1), k=2, seed=5)
    after = rollout(env, PROBE, candidate, learning_model(seed=1), k=2, seed=5)
    decision = decide_round(before, {candidate.version: after}, GateConfig(), 0.05)[0]
    assert decision.candidate_pass >= decision.incumbent_pass
    assert decision.accepted
