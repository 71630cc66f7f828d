import json

import pytest

from fakes import learning_model
from ratchet.envs.calc import env
from ratchet.improve import ImproveConfig, improve
from ratchet.store import Store

CONFIG = ImproveConfig(
    env="calc",
    model="fake",
    levers=("exemplars",),
    rounds=2,
    train_tasks=16,
    train_k=2,
    probe_tasks=24,
    test_tasks=24,
    max_difficulty=2,
    concurrency=8,
)


def quiet(line):
    pass


def test_exemplars_are_accepted_and_the_summary_says_so(tmp_path):
    summary = improve(CONFIG, env, tmp_path, lambda agent, directory: learning_model(), log=quiet)
    assert summary == json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) >= {
        "env",
        "model",
        "levers",
        "base",
        "final",
        "rounds",
        "seconds",
        "tokens",
    }
    assert set(summary["base"]) >= {"pass@1", "pass^k", "mean_score", "n"}
    first = summary["rounds"][0]
    assert set(first) >= {"round", "candidates", "seconds", "tokens"}
    candidate = first["candidates"][0]
    assert set(candidate) >= {"lever", "probe_gain", "p_value", "flips_pass_to_fail", "accepted"}
    assert candidate["accepted"] and summary["final_version"] == "v1"
    assert summary["final"]["pass@1"] > summary["base"]["pass@1"] + 0.3
    with Store(tmp_path) as store:
        lineage = [v.id for v in store.lineage("v1")]
        assert lineage == ["base", "v1"]
        assert store.agent_version("v1").metadata["accepted"] is True
        test_agents = {t.agent for _, t in store.trajectories(split="test")}
    assert test_agents == {"base", "v1"}
    agent = json.loads((tmp_path / "agents" / "v1" / "agent.json").read_text())
    assert agent["parent"] == "base" and agent["exemplars"]


def test_test_split_is_never_used_for_decisions(tmp_path):
    summary = improve(CONFIG, env, tmp_path, lambda a, d: learning_model(), log=quiet)
    with Store(tmp_path) as store:
        probe_ids = {t.task.id for _, t in store.trajectories(split="probe")}
        test_ids = {t.task.id for _, t in store.trajectories(split="test")}
    assert probe_ids and test_ids and not probe_ids & test_ids
    assert summary["rounds"][0]["candidates"][0]["tasks"] == len(probe_ids)


class Interrupt(Exception):
    pass


def test_resume_after_a_kill_mid_round_loses_nothing(tmp_path):
    calls = {"n": 0}

    def dying(agent, directory):
        model = learning_model()
        complete = model.complete

        def complete_or_die(prompts, sampling):
            calls["n"] += 1
            if calls["n"] == 6:  # during round 1's training rollouts
                raise Interrupt
            return complete(prompts, sampling)

        model.complete = complete_or_die
        return model

    with pytest.raises(Interrupt):
        improve(CONFIG, env, tmp_path, dying, log=quiet)
    with Store(tmp_path) as store:
        before = {(t.task.id, t.agent, t.sample): i for i, t in store.trajectories()}
    assert before
    summary = improve(CONFIG, env, tmp_path, lambda a, d: learning_model(), resume=True, log=quiet)
    with Store(tmp_path) as store:
        after = {(t.task.id, t.agent, t.sample): i for i, t in store.trajectories()}
    assert all(after[key] == row for key, row in before.items())
    assert len(summary["rounds"]) == 2


def test_an_existing_run_needs_resume_and_matching_settings(tmp_path):
    improve(CONFIG, env, tmp_path, lambda a, d: learning_model(), log=quiet)
    with pytest.raises(ValueError, match="already holds a run"):
        improve(CONFIG, env, tmp_path, lambda a, d: learning_model(), log=quiet)
    other = ImproveConfig(**{**CONFIG.to_dict(), "levers": ("exemplars",), "probe_tasks": 10})
    with pytest.raises(ValueError, match="other settings"):
        improve(other, env, tmp_path, lambda a, d: learning_model(), resume=True, log=quiet)
    with pytest.raises(ValueError, match="holds no run"):
        improve(CONFIG, env, tmp_path / "empty", lambda a, d: learning_model(), resume=True)


def test_cached_backends_build_each_model_and_adapter_once(tmp_path):
    from ratchet.agent import Agent
    from ratchet.improve import cached_backends

    built = []
    backends = cached_backends(
        lambda spec, adapter: built.append((spec, adapter)) or learning_model()
    )
    base, child = Agent(model="fake"), Agent(model="fake", version="v1", adapter="adapter")
    assert backends(base, None) is backends(Agent(model="fake", version="v9"), tmp_path)
    assert backends(child, tmp_path) is not backends(base, None)
    assert built == [("fake", None), ("fake", tmp_path / "adapter")]


def test_a_candidate_keeps_the_incumbents_adapter_by_a_relative_path(tmp_path):
    from ratchet.agent import Agent
    from ratchet.levers.exemplars import ExemplarLever

    class AddsAdapter:
        name = "rft"

        def propose(self, context):
            (context.workdir / "adapter").mkdir()
            return context.incumbent.derive(context.version, self.name, adapter="adapter")

    seen = {}

    def backend(agent, directory):
        path = agent.adapter_path(directory)
        seen[agent.version] = path
        assert path is None or path.resolve().is_dir()
        return learning_model(unskilled=0.95) if path else learning_model()

    config = ImproveConfig(**{**CONFIG.to_dict(), "levers": ("rft", "exemplars")})
    levers = [AddsAdapter(), ExemplarLever()]
    improve(config, env, tmp_path, backend, log=quiet, levers=levers)
    child = Agent.from_dict(json.loads((tmp_path / "agents" / "v4" / "agent.json").read_text()))
    assert (child.parent, child.lever) == ("v1", "exemplars")
    assert child.adapter == "../v1/adapter"
    assert seen["v4"].resolve() == (tmp_path / "agents" / child.parent / "adapter").resolve()
