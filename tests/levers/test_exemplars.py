from fakes import learning_model
from ratchet.agent import Agent
from ratchet.envs.calc import env
from ratchet.gate import GateConfig, decide
from ratchet.levers import LeverContext
from ratchet.levers.exemplars import ExemplarLever
from ratchet.rollout import RolloutConfig, rollout
from ratchet.trajectory import play

TRAIN = env.tasks("train", 30, difficulty=1)
PROBE = env.tasks("probe", 30, difficulty=1)


def context(experience, incumbent=None, tmp_path=None):
    return LeverContext(
        env=env,
        incumbent=incumbent or Agent(model="fake"),
        experience=experience,
        model=None,
        reflector=None,
        workdir=tmp_path,
        version="v1",
    )


def successes():
    return [play(env, t, env.oracle(t)) for t in TRAIN[:10]]


def test_the_pool_holds_verified_successes_only(tmp_path):
    failed = [play(env, t, []) for t in TRAIN[10:20]]
    candidate = ExemplarLever().propose(context([*successes(), *failed], tmp_path=tmp_path))
    assert candidate is not None
    assert (
        candidate.version == "v1" and candidate.parent == "base" and candidate.lever == "exemplars"
    )
    assert {e.instruction for e in candidate.exemplars} == {t.instruction for t in TRAIN[:10]}
    first = candidate.exemplars[0]
    assert first.turns[0]["role"] == "assistant" and first.turns[-1]["role"] == "tool"


def test_nothing_new_means_no_candidate(tmp_path):
    assert ExemplarLever().propose(context([play(env, TRAIN[0], [])], tmp_path=tmp_path)) is None
    candidate = ExemplarLever().propose(context(successes(), tmp_path=tmp_path))
    assert ExemplarLever().propose(context(successes(), candidate, tmp_path)) is None


def test_demonstrations_do_not_lower_the_toy_score(tmp_path):
    base = Agent(model="fake")
    candidate = ExemplarLever().propose(context(successes(), base, tmp_path))
    assert candidate is not None
    config = RolloutConfig(k=2, seed=5)
    before = rollout(env, PROBE, base, learning_model(seed=1), config)
    after = rollout(env, PROBE, candidate, learning_model(seed=1), config)
    decision = decide(before, after, GateConfig())
    assert decision.candidate_pass >= decision.incumbent_pass
    assert decision.accepted
