import json
import math
import random
import re
from dataclasses import replace

import pytest

from fakes import (
    FakeModel,
    FakeTrainer,
    exploring_model,
    is_task,
    learning_model,
    skill_backends,
    solve_calc,
)
from ratchet.core.agent import Agent, load_agent
from ratchet.core.stats import holm
from ratchet.core.task import split_of
from ratchet.core.verdict import Verdict
from ratchet.engine.models import cached_backends
from ratchet.engine.models.base import offered_tools
from ratchet.engine.rollout import RolloutConfig
from ratchet.engine.store import Store
from ratchet.envs.calc import env
from ratchet.envs.registry import load_env_reference
from ratchet.improve.config import ImproveConfig
from ratchet.improve.gate import probe_size, spent_alpha
from ratchet.improve.hindsight import episode_key, sources
from ratchet.improve.levers import NoCandidate
from ratchet.improve.loop import improve
from ratchet.improve.summary import round_lines
from ratchet.report import write_report

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
    rollout=RolloutConfig(concurrency=8, max_reply_tokens=48),
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
    assert set(first) >= {"round", "candidates", "seconds", "tokens", "seconds_by_phase"}
    phases = first["seconds_by_phase"]
    assert set(phases) == {"practice", "proposals", "gate", "test"}  # v1 accepted: curve test
    assert list(phases["proposals"]) == list(CONFIG.levers)
    spent = phases["practice"] + sum(phases["proposals"].values()) + phases["gate"] + phases["test"]
    assert all(s >= 0 for s in [*phases["proposals"].values(), phases["practice"]])
    assert spent <= first["seconds"] + 0.5  # the phases are parts of the round
    assert "time: practice" in round_lines(first)
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


class FlipsTestOutcomes:
    """The calc env, except that test-split verdicts are flipped at random."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.name, self.description, self.version = env.name, env.description, env.version
        self.max_difficulty, self.describe = env.max_difficulty, env.describe

    def tasks(self, split, n, seed=0, difficulty=None):
        return env.tasks(split, n, seed, difficulty)

    def oracle(self, task):
        return env.oracle(task)

    def session(self, task):
        session = env.session(task)
        if task.split == "test":
            real, flip = session.verify, self.rng.random() < 0.5
            session.verify = lambda: Verdict.of(real().passed != flip)  # type: ignore[method-assign]
        return session


def decisions_of(out):
    with Store(out) as store:
        return [
            (d.round, d.lever, d.candidate, d.incumbent, d.accepted, d.numbers)
            for d in store.decisions()
        ], [(v.id, v.parent, v.lever) for v in store.agent_versions()]


def test_test_outcomes_never_reach_a_decision(tmp_path):
    plain = improve(CONFIG, env, tmp_path / "a", lambda a, d: learning_model(), log=quiet)
    for seed in (1, 2):
        flipped = improve(
            CONFIG,
            FlipsTestOutcomes(seed),
            tmp_path / f"b{seed}",
            lambda a, d: learning_model(),
            log=quiet,
        )
        assert flipped["base"] != plain["base"]  # the perturbation did reach the test split
        assert decisions_of(tmp_path / f"b{seed}") == decisions_of(tmp_path / "a")
        assert flipped["final_version"] == plain["final_version"]
        assert [r["incumbent"] for r in flipped["rounds"]] == [
            r["incumbent"] for r in plain["rounds"]
        ]
        final = load_agent(str(tmp_path / f"b{seed}" / "agents" / flipped["final_version"]))[0]
        assert final == load_agent(str(tmp_path / "a" / "agents" / plain["final_version"]))[0]


def test_no_relabelled_training_task_has_a_probe_or_test_problem(tmp_path):
    summary = improve(CONFIG, env, tmp_path, lambda a, d: exploring_model(), log=quiet)
    with Store(tmp_path) as store:
        relabelled = [
            t for _, t in store.trajectories(split="train") if t.metadata.get("hindsight")
        ]
        held = {t.task.problem for _, t in store.trajectories() if t.task.split != "train"}
    stored = sum(r["relabelled"] + r["trimmed"] for r in summary["rounds"])
    assert relabelled and stored == len(relabelled)
    assert sum(r["relabels_held_out"] for r in summary["rounds"]) > 0  # some were dropped
    assert all(split_of(t.task.problem) == "train" for t in relabelled)
    assert not {t.task.problem for t in relabelled} & held
    drawn = {
        task.problem
        for split in ("probe", "test")
        for difficulty in (1, 2)
        for seed in range(10)
        for task in env.tasks(split, 200, seed=seed, difficulty=difficulty)
    }
    assert not {t.task.problem for t in relabelled} & drawn


def test_a_lever_that_proposes_nothing_uses_no_version_number(tmp_path):
    class Idle:
        name = "idle"

        def propose(self, context):
            return None

    class Explains:
        name = "explains"

        def propose(self, context):
            raise NoCandidate("no data of the kind it needs")

    from ratchet.improve.levers.exemplars import ExemplarLever

    config = replace(CONFIG, levers=("idle", "explains", "exemplars"))
    lines = []
    summary = improve(
        config,
        env,
        tmp_path,
        lambda a, d: learning_model(),
        log=lines.append,
        levers=[Idle(), Explains(), ExemplarLever()],
    )
    versions = [c["version"] for r in summary["rounds"] for c in r["candidates"] if c["version"]]
    assert versions == [f"v{i}" for i in range(1, len(versions) + 1)]
    idle = [c for r in summary["rounds"] for c in r["candidates"] if c["lever"] == "idle"]
    assert idle and all(c["reason"] == "nothing to propose" for c in idle)
    said = [c for r in summary["rounds"] for c in r["candidates"] if c["lever"] == "explains"]
    why = "nothing to propose: no data of the kind it needs"
    assert said and all(c["reason"] == why and c["version"] is None for c in said)
    assert any(f"explains: {why}" in line for line in lines)


def test_a_round_splits_its_alpha_by_the_levers_records(tmp_path):
    from ratchet.improve.levers.exemplars import ExemplarLever

    class Same:
        name = "same"

        def propose(self, context):
            return context.incumbent.derive(context.version, self.name)

    config = replace(CONFIG, levers=("exemplars", "same"))
    levers = [ExemplarLever(), Same()]
    lines = []
    summary = improve(
        config, env, tmp_path, lambda a, d: learning_model(), log=lines.append, levers=levers
    )
    first, second = summary["rounds"]
    assert first["alpha_shares"] == {"exemplars": 0.5, "same": 0.5}
    assert [c["accepted"] for c in first["candidates"]] == [True, False]
    assert second["alpha_shares"] == {"exemplars": 2 / 3, "same": 1 / 3}
    p_values = [c["p_value"] for c in second["candidates"]]
    thresholds = [t for _, t in holm(p_values, second["alpha"], [2 / 3, 1 / 3])]
    assert [c["threshold"] for c in second["candidates"]] == pytest.approx(thresholds)
    assert "over levers: round 2 exemplars 0.67, same 0.33)" in write_report(tmp_path).read_text()
    split = "split by the levers' records: exemplars 0.67, same 0.33"
    assert f"  alpha {second['alpha']:.4f} {split}" in lines


def test_a_start_that_failed_does_not_block_the_directory(tmp_path):
    def broken(agent, directory):
        raise RuntimeError("no such model")

    with pytest.raises(RuntimeError):
        improve(CONFIG, env, tmp_path, broken, log=quiet)
    summary = improve(CONFIG, env, tmp_path, lambda a, d: learning_model(), log=quiet)
    assert len(summary["rounds"]) == 2


class Interrupt(BaseException):  # like a kill: not an error an episode could record
    pass


def test_resume_after_a_kill_mid_round_loses_nothing(tmp_path):
    calls = {"n": 0}

    def dying(agent, directory):
        model = learning_model()
        complete = model.complete

        def complete_or_die(prompts, sampling):
            calls["n"] += 1
            if calls["n"] == 40:  # base test: 24 calls; round 1's training: 32 calls
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
    other = replace(CONFIG, probe_tasks=10)
    with pytest.raises(ValueError, match="other settings"):
        improve(other, env, tmp_path, lambda a, d: learning_model(), resume=True, log=quiet)
    with pytest.raises(ValueError, match="holds no run"):
        improve(CONFIG, env, tmp_path / "empty", lambda a, d: learning_model(), resume=True)


def test_a_run_resumed_with_more_rounds_than_it_planned_keeps_the_alpha_bound(tmp_path):
    planned = improve(CONFIG, env, tmp_path, lambda a, d: learning_model(), log=quiet)
    first, second = planned["rounds"]
    assert first["alpha"] == pytest.approx(0.025)
    # Round 1's candidates were all significant: round 2 had its share too, and spent it all.
    assert all(c["p_value"] <= c["threshold"] for c in first["candidates"] if "p_value" in c)
    assert second["alpha"] == pytest.approx(0.05)
    assert spent_alpha(first) + spent_alpha(second) == pytest.approx(0.05)
    more = replace(CONFIG, rounds=3)
    with pytest.raises(ValueError, match=r"spent all of alpha 0\.05"):
        improve(more, env, tmp_path, lambda a, d: learning_model(), resume=True, log=quiet)


def test_cached_backends_build_each_model_and_adapter_once(tmp_path):
    built = []
    backends = cached_backends(
        lambda spec, adapter: built.append((spec, adapter)) or learning_model()
    )
    base, child = Agent(model="fake"), Agent(model="fake", version="v1", adapter="adapter")
    assert backends(base, None) is backends(Agent(model="fake", version="v9"), tmp_path)
    assert backends(child, tmp_path) is not backends(base, None)
    assert built == [("fake", None), ("fake", tmp_path / "adapter")]


def test_a_candidate_keeps_the_incumbents_adapter_by_a_relative_path(tmp_path):
    from ratchet.improve.levers.exemplars import ExemplarLever

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

    config = replace(CONFIG, levers=("rft", "exemplars"), explore="off")
    levers = [AddsAdapter(), ExemplarLever()]
    improve(config, env, tmp_path, backend, log=quiet, levers=levers)
    child = load_agent(str(tmp_path / "agents" / "v4"))[0]
    assert (child.parent, child.lever) == ("v1", "exemplars")
    assert child.adapter == "../v1/adapter"
    assert seen["v4"].resolve() == (tmp_path / "agents" / child.parent / "adapter").resolve()
    # A new adapter of the same name as the incumbent's is the candidate's own.
    retrained = load_agent(str(tmp_path / "agents" / "v3"))[0]
    assert (retrained.parent, retrained.lever, retrained.adapter) == ("v1", "rft", "adapter")
    assert seen["v3"].resolve() == (tmp_path / "agents" / "v3" / "adapter").resolve()


def test_a_probe_the_gate_can_never_accept_on_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"smallest reachable p-value is 0\.125"):
        improve(replace(CONFIG, probe_tasks=3), env, tmp_path / "a", None, log=quiet)
    assert not (tmp_path / "a").exists()


def test_a_pool_with_a_small_probe_split_is_refused_before_any_work(tmp_path):
    from ratchet.core.env import SimpleEnv
    from ratchet.core.pool import TaskPool
    from ratchet.core.task import TaskSpec

    specs = [TaskSpec(f"Say {n}.", {"n": n}) for n in range(60)]
    pooled = SimpleEnv(
        name="pool",
        description="a benchmark with 3 probe problems",
        sample=TaskPool(train=specs[:50], probe=specs[50:53], test=specs[53:]),
        build=lambda task: None,
        tools=lambda world: [],
        verify=lambda task, world, answer: Verdict.of(answer == str(task.params["n"])),
        oracle=env.oracle,
    )
    config = replace(CONFIG, max_difficulty=1, probe_tasks=8)
    with pytest.raises(
        ValueError, match="probe split holds 3 problems at difficulty 1, fewer than the 8"
    ):
        improve(config, pooled, tmp_path / "b", None, log=quiet)
    assert not (tmp_path / "b").exists()


LEARNING = replace(
    CONFIG, rounds=1, train_tasks=12, probe_tasks=30, test_tasks=24, max_difficulty=1
)


def test_pairs_learn_from_failures_through_the_trainer_and_the_score_does_not_drop(tmp_path):
    trainer = FakeTrainer(base=0.3)
    options = {"beta": 0.2, "chosen_nll_weight": 1.0, "anchor_weight": 0.5}
    config = replace(LEARNING, levers=("pairs",), train_steps=9, lever_options={"pairs": options})
    summary = improve(
        config, env, tmp_path, skill_backends(0.3), log=quiet, trainer=lambda: trainer
    )
    (call,) = trainer.calls
    assert call["method"] == "dpo" and call["data"] and call["start"] is None
    settings = call["settings"]
    assert (settings.beta, settings.chosen_nll_weight, settings.steps) == (0.2, 1.0, 9)
    assert settings.anchor_weight == 0.5 and call["anchors"]
    assert all(episode.passed for episode in call["anchors"])
    for pair in call["data"]:
        assert pair.chosen != pair.rejected and pair.messages[-1]["role"] == "user"
    assert summary["final_version"] == "v1" and summary["self_improvement"]
    assert summary["final"]["pass@1"] >= summary["base"]["pass@1"]
    pairs = replace(LEARNING, levers=("pairs",))
    with pytest.raises(ValueError, match=r"pairs\.chosen_nll_weight weighs a loss term"):
        replace(pairs, lever_options={"pairs": {"chosen_nll_weight": -1.0}})
    with pytest.raises(ValueError, match=r"pairs\.anchor_weight weighs a loss term"):
        replace(pairs, lever_options={"pairs": {"anchor_weight": -0.1}})


def test_rft_trains_with_the_runs_length_exponent(tmp_path):
    rft = replace(LEARNING, levers=("rft",))
    with pytest.raises(ValueError, match=r"rft\.length_exponent is from 0"):
        replace(rft, lever_options={"rft": {"length_exponent": 1.5}})
    trainer = FakeTrainer(base=0.3)
    options = {"length_exponent": 0.8, "steps": 4, "epochs": 0}
    config = replace(rft, lever_options={"rft": options})
    improve(config, env, tmp_path, skill_backends(0.3), log=quiet, trainer=lambda: trainer)
    (call,) = trainer.calls
    assert call["method"] == "sft" and call["settings"].length_exponent == 0.8
    assert call["settings"].steps == 4  # the lever's own steps over --train-steps


def test_a_weight_lever_puts_its_adapter_on_the_share_of_layers_its_depth_says(tmp_path):
    for lever in ("rft", "pairs", "grpo", "demos"):
        for depth in (0.0, 1.5):
            with pytest.raises(ValueError, match=rf"{lever}\.lora_depth is the share"):
                replace(LEARNING, levers=(lever,), lever_options={lever: {"lora_depth": depth}})
    trainer = FakeTrainer(base=0.3)
    options = {"rft": {"lora_depth": 0.25, "steps": 2, "epochs": 0}}
    config = replace(LEARNING, levers=("rft",), lever_options=options)
    improve(config, env, tmp_path, skill_backends(0.3), log=quiet, trainer=lambda: trainer)
    (call,) = trainer.calls
    assert call["settings"].depth == 0.25


def test_rft_trains_for_its_epochs_over_the_successes_within_its_steps(tmp_path):
    rft = replace(LEARNING, levers=("rft",))
    with pytest.raises(ValueError, match=r"rft\.epochs counts passes"):
        replace(rft, lever_options={"rft": {"epochs": -1.0}})
    with pytest.raises(ValueError, match=r"rft\.max_steps is at least 1"):
        replace(rft, lever_options={"rft": {"max_steps": 0}})
    trainer = FakeTrainer(base=0.3)
    config = replace(rft, lever_options={"rft": {"steps": 1, "epochs": 2.5, "max_steps": 999}})
    improve(config, env, tmp_path, skill_backends(0.3), log=quiet, trainer=lambda: trainer)
    (call,) = trainer.calls
    successes = len(call["data"])
    assert successes > 4
    assert call["settings"].steps == math.ceil(2.5 * successes / call["settings"].batch_size)


def test_lever_options_are_stored_with_the_run_and_resume_must_match(tmp_path):
    config = replace(CONFIG, rounds=1, lever_options={"exemplars": {"per_task": "3"}})
    assert config.lever_options == {"exemplars": {"per_task": 3}}
    improve(config, env, tmp_path, lambda a, d: learning_model(), log=quiet)
    stored = json.loads((tmp_path / "summary.json").read_text())["config"]
    assert stored["lever_options"] == {"exemplars": {"per_task": 3}}
    with pytest.raises(ValueError, match="other settings"):
        improve(replace(config, lever_options={}), env, tmp_path, None, resume=True)


def test_grpo_trains_on_the_incumbents_groups_and_the_score_does_not_drop(tmp_path):
    trainer = FakeTrainer(base=0.3)
    config = replace(LEARNING, levers=("grpo",), lever_options={"grpo": {"learning_rate": 3e-5}})
    summary = improve(
        config, env, tmp_path, skill_backends(0.3), log=quiet, trainer=lambda: trainer
    )
    (call,) = trainer.calls
    assert call["method"] == "grpo" and call["settings"].learning_rate == 3e-5
    assert {s.trajectory.agent for s in call["data"]} == {"base"}
    assert abs(sum(s.advantage for s in call["data"])) < 1e-9  # relative within each group
    assert summary["final"]["pass@1"] >= summary["base"]["pass@1"]


def test_demos_gains_are_privileged_everywhere_they_are_recorded(tmp_path):
    config = replace(LEARNING, levers=("demos",))
    summary = improve(
        config, env, tmp_path, skill_backends(0.1), log=quiet, trainer=lambda: FakeTrainer()
    )
    assert summary["final_version"] == "v1"
    assert summary["privileged"] == {"v1": {"source": "oracle", "demos": 12, "file": "demos.jsonl"}}
    assert summary["self_improvement"] is False
    (candidate,) = summary["rounds"][0]["candidates"]
    assert candidate["privileged"]["source"] == "oracle"
    with Store(tmp_path) as store:
        assert store.agent_version("v1").metadata["privileged"]["source"] == "oracle"
    from ratchet.report import write_report

    page = write_report(tmp_path).read_text()
    assert "not self-improvement" in page and "privileged" in page


def test_exploration_picks_temperatures_per_task_and_the_round_says_why(tmp_path):
    config = replace(CONFIG, rounds=2, levers=("exemplars",))
    summary = improve(config, env, tmp_path, lambda a, d: learning_model(), log=quiet)
    first, second = summary["rounds"]
    assert set(first["explore_temperatures"]) == {"0.5", "0.9"}  # nothing known yet: spread
    assert len(second["explore_temperatures"]) >= 2
    assert sum(n for _, n in second["explore_temperatures"].values()) == 32
    assert first["curriculum"]["open_to"] == 1 and "probe" in first["curriculum"]
    assert second["curriculum"]["probe"]  # the incumbent's probe rates from round 1
    with Store(tmp_path) as store:
        train = [t for _, t in store.trajectories(split="train") if not t.metadata.get("hindsight")]
    assert all(t.exploration is not None for t in train)
    fixed = improve(
        replace(config, rounds=1, search=replace(config.search, temperature=0.6)),
        env,
        tmp_path / "fixed",
        lambda a, d: learning_model(),
        log=quiet,
    )
    assert set(fixed["rounds"][0]["explore_temperatures"]) == {"0.6"}


def test_skills_tasks_and_prompt_levers_run_in_the_loop_and_are_recorded(tmp_path):
    from ratchet.improve.levers.prompt import PromptLever
    from ratchet.improve.levers.skills import SkillLever
    from ratchet.improve.levers.tasks import TaskLever, VariantProposer

    config = replace(CONFIG, levers=("skills", "tasks", "prompt"), rounds=2)
    levers = [SkillLever(), TaskLever(proposer=VariantProposer()), PromptLever(budget=12)]
    summary = improve(
        config, env, tmp_path, lambda a, d: exploring_model(), log=quiet, levers=levers
    )
    for record in summary["rounds"]:
        assert [c["lever"] for c in record["candidates"]] == ["skills", "tasks", "prompt"]
    proposed = summary["rounds"][0]["proposed_tasks"]["tasks"]
    assert proposed["accepted"] > 0 and set(proposed["rejected"]) <= {
        "invalid params",
        "probe or test problem",
        "duplicate",
        "too hard",
    }
    skills = next(c for c in summary["rounds"][0]["candidates"] if c["lever"] == "skills")
    agent = json.loads((tmp_path / "agents" / skills["version"] / "agent.json").read_text())
    assert agent["skills"] and agent["lever"] == "skills"
    state = json.loads((tmp_path / "state.json").read_text())
    offered = {t["id"] for t in state["proposed_tasks"]}
    second = {t["id"] for t in state["round_tasks"]["2"]["tasks"]}
    assert offered & second  # the curriculum mixed proposed tasks into the next round
    with Store(tmp_path) as store:
        practice = [t for _, t in store.trajectories(split="train") if "lever" in t.metadata]
    assert {t.metadata["lever"] for t in practice} >= {"tasks", "prompt"}
    assert all(t.task.split == "train" for t in practice)


def test_the_probe_covers_the_open_levels_and_the_test_every_level(tmp_path):
    config = replace(CONFIG, rounds=1)
    summary = improve(config, env, tmp_path / "open", lambda a, d: learning_model(), log=quiet)
    assert summary["rounds"][0]["curriculum"]["probe_to"] == 1
    with Store(tmp_path / "open") as store:
        probed = {t.task.difficulty for _, t in store.trajectories(split="probe")}
        tested = {t.task.difficulty for _, t in store.trajectories(split="test")}
    assert probed == {1} and tested == {1, 2}
    every = replace(config, probe_all_levels=True)
    summary = improve(every, env, tmp_path / "all", lambda a, d: learning_model(), log=quiet)
    assert summary["rounds"][0]["curriculum"]["probe_to"] == 2
    with Store(tmp_path / "all") as store:
        assert {t.task.difficulty for _, t in store.trajectories(split="probe")} == {1, 2}


def test_hindsight_keeps_only_tasks_of_the_open_levels(tmp_path):
    def reply(prompt, rng):
        results = [m["content"] for m in prompt.messages if m["role"] == "tool"]
        if len(results) == 2:
            return json.dumps({"name": "finish", "arguments": {"answer": "-1"}})
        task = [m["content"] for m in prompt.messages if m["role"] == "user"][-1]
        start = int(results[-1]) if results else int(re.findall(r"\d+", task)[0])
        return json.dumps({"name": "add", "arguments": {"a": start, "b": rng.randint(1, 9)}})

    config = replace(CONFIG, rounds=1, levers=("exemplars",))
    improve(config, env, tmp_path, lambda a, d: FakeModel(reply=reply), log=quiet)
    with Store(tmp_path) as store:
        train = [t for _, t in store.trajectories(split="train")]
    relabelled = [t for t in train if t.metadata.get("hindsight")]
    # Two adds then a wrong finish: the one-add prefixes are level 1 (kept), the two-add
    # prefixes level 2, above the open level 1 (dropped).
    assert relabelled and {t.task.difficulty for t in relabelled} == {1}
    assert {len(t.steps) for t in relabelled} == {2}


def test_each_strategys_relabelled_branches_are_counted_in_the_rounds_record(tmp_path):
    def reply(prompt, rng):  # finishes at once when it may, else adds and then finishes
        results = [m["content"] for m in prompt.messages if m["role"] == "tool"]
        if results or "finish" in {t["function"]["name"] for t in offered_tools(prompt)}:
            return json.dumps({"name": "finish", "arguments": {"answer": "-1"}})
        task = [m["content"] for m in prompt.messages if m["role"] == "user"][-1]
        start = int(re.findall(r"\d+", task)[0])
        return json.dumps({"name": "add", "arguments": {"a": start, "b": rng.randint(1, 9)}})

    config = replace(CONFIG, rounds=1, levers=("exemplars",))
    summary = improve(config, env, tmp_path, lambda a, d: FakeModel(reply=reply), log=quiet)
    with Store(tmp_path) as store:
        train = [t for _, t in store.trajectories(split="train")]
    # The roots finish at once and teach nothing; the branches made to act are relabelled.
    branches = {episode_key(t) for t in train if t.exploration and t.exploration.parent is not None}
    taught = sources(train)
    assert taught and taught <= branches
    by_strategy = summary["rounds"][0]["exploration"]["strategies"]
    counted = sum(counts[3] for levels in by_strategy.values() for counts in levels.values())
    assert counted == len(taught)


def explored(config, directory):
    """Run ``config`` and return its summary, real training episodes and probe/test episodes."""
    summary = improve(config, env, directory, lambda a, d: learning_model(), log=quiet)
    with Store(directory) as store:
        train = [
            t
            for _, t in store.trajectories(split="train")
            if not t.metadata.get("hindsight") and not t.metadata.get("lever")
        ]
        held_out = [t for split in ("probe", "test") for _, t in store.trajectories(split=split)]
    return summary, train, held_out


def test_tasks_no_sample_solved_are_searched_and_probe_and_test_are_never_steered(tmp_path):
    config = replace(CONFIG, rounds=1)
    summary, train, held_out = explored(config, tmp_path / "auto")
    record = summary["rounds"][0]["exploration"]
    k, branches = config.train_k, config.search.branches_per_task
    roots = [t for t in train if t.sample < k]
    assert record["roots"] == [sum(t.passed for t in roots), len(roots)]
    unsolved = {t.task.id for t in roots} - {t.task.id for t in roots if t.passed}
    searched = [t for t in train if t.sample >= k]
    assert searched and {t.task.id for t in searched} <= unsolved
    assert record["branches"] == len(searched) and record["searched"] == len(
        {t.task.id for t in searched}
    )
    assert all(k <= t.sample < k + branches for t in searched)
    assert all(t.exploration is not None and t.exploration.parent is not None for t in searched)
    assert all(t.exploration is not None and t.exploration.own for t in roots)
    by_strategy = record["strategies"]
    assert sum(n for levels in by_strategy.values() for n, *_ in levels.values()) == len(searched)
    # The record counts each strategy's branches that hindsight relabelled at their level.
    with Store(tmp_path / "auto") as store:
        relabels = [t for _, t in store.trajectories(split="train") if t.metadata.get("hindsight")]
    taught = sources([*searched, *relabels]) & {episode_key(t) for t in searched}
    relabelled = sum(counts[3] for levels in by_strategy.values() for counts in levels.values())
    assert relabelled == len(taught)
    assert not any(t.exploration for t in held_out)
    summary, train, held_out = explored(replace(config, explore="off"), tmp_path / "off")
    assert all(t.sample < k for t in train) and summary["rounds"][0]["exploration"]["branches"] == 0
    with pytest.raises(ValueError, match="auto, off"):
        replace(config, explore="sometimes")


def unsteady_model():
    """A calc agent that answers right with probability 0.6 without demonstrations and 0.85
    with them, the two drawing different random numbers, so a better candidate still fails
    some probe tasks the incumbent passed, by chance alone."""

    def reply(prompt, rng):
        tasks = [
            m["content"] for m in prompt.messages if m["role"] == "user" and is_task(m["content"])
        ]
        shown = len(tasks) > 1
        if shown:
            rng.random()
        chance = 0.85 if shown else 0.6
        answer = solve_calc(tasks[-1]) if rng.random() < chance else -12345
        return json.dumps({"name": "finish", "arguments": {"answer": str(answer)}})

    return FakeModel(reply=reply)


def test_flips_alone_would_reject_so_the_flipped_tasks_are_retested(tmp_path):
    config = replace(CONFIG, rounds=1, probe_tasks=40, gate=replace(CONFIG.gate, flip_budget=0.02))
    improve(config, env, tmp_path, lambda agent, directory: unsteady_model(), log=quiet)
    (_, _, candidate, _, accepted, numbers), *_ = decisions_of(tmp_path)[0]
    assert numbers["flips_pass_to_fail"] > numbers["flip_limit"] == 1
    # The flips were the sampling's: the retest confirms none of them and the candidate stands.
    assert numbers["confirmed_flips"] == 0 and accepted
    assert "0 confirmed by a retest of 4 samples" in numbers["reason"]
    with Store(tmp_path) as store:
        retested = [t for _, t in store.trajectories(split="probe") if t.sample >= 1000]
    for agent in ("base", candidate):
        played = sorted((t.task.id, t.sample) for t in retested if t.agent == agent)
        k = config.gate.retest_k
        assert played == sorted((task, 1000 + s) for task in numbers["flipped"] for s in range(k))
    html = write_report(tmp_path).read_text()
    assert f"{numbers['flips_pass_to_fail']} (0 confirmed) / 1" in html
    assert "replays each flipped task 4 more times" in html


def test_the_summary_and_the_report_list_the_env_s_accepted_red_team_findings(tmp_path):
    reason = "the scorer of the benchmark, kept as published"
    accepting = replace(env, accepted_findings={"red-team: huge answer": reason})
    small = replace(CONFIG, rounds=1, train_tasks=4, train_k=1, test_tasks=4)
    summary = improve(small, accepting, tmp_path, lambda a, d: learning_model(), log=quiet)
    assert summary["accepted_findings"] == {"red-team: huge answer": reason}
    page = write_report(tmp_path).read_text()
    assert "1 red-team finding(s) accepted knowingly" in page and reason in page


def test_a_run_of_no_rounds_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="--rounds must be at least 1"):
        ImproveConfig(env="calc", rounds=0)


def test_a_model_that_cannot_be_trained_leaves_the_weight_levers_out_and_says_so(tmp_path):
    lines = []
    config = replace(
        CONFIG, levers=("exemplars", "rft"), rounds=1, lever_options={"rft": {"steps": 5}}
    )
    summary = improve(config, env, tmp_path, lambda a, d: learning_model(), log=lines.append)
    assert summary["levers"] == ["exemplars"]
    assert [c["lever"] for c in summary["rounds"][0]["candidates"]] == ["exemplars"]
    (said,) = [line for line in lines if "left out" in line]
    assert "rft" in said and "'fake' cannot be trained here" in said


def test_only_weight_levers_on_a_model_that_cannot_be_trained_is_refused_before_any_work(
    tmp_path,
):
    config = replace(CONFIG, levers=("rft", "pairs"))
    with pytest.raises(ValueError, match="no lever of rft, pairs can run: 'fake' cannot"):
        improve(config, env, tmp_path / "run", lambda a, d: learning_model(), log=quiet)
    assert not (tmp_path / "run").exists()


SUITE_CONFIG = replace(CONFIG, env="calc,grid")


def calc_learner(die_at=None, calls=None):
    """Solves a calc task 9 times in 10 when shown demonstrations, 1 in 10 without; answers
    every grid task wrong (so the suite's gain is all calc's). Raises ``Interrupt`` on its
    ``die_at``-th batch, counted in ``calls`` (shared by the models of one run)."""

    def reply(prompt, rng: random.Random) -> str:
        users = [m["content"] for m in prompt.messages if m["role"] == "user"]
        answer = "nothing"
        if is_task(users[-1]) and solve_calc(users[-1]) is not None:
            shown = sum(is_task(text) for text in users) > 1
            if rng.random() < (0.9 if shown else 0.1):
                answer = str(solve_calc(users[-1]))
        return json.dumps({"name": "finish", "arguments": {"answer": answer}})

    model, calls = FakeModel(reply=reply), calls if calls is not None else {"n": 0}
    complete = model.complete

    def complete_or_die(prompts, sampling):
        calls["n"] += 1
        if calls["n"] == die_at:  # base test: 24 calls; round 1's training: 32 calls
            raise Interrupt
        return complete(prompts, sampling)

    model.complete = complete_or_die
    return model


def test_a_suite_run_reports_per_env_and_per_level_and_its_report_too(tmp_path):
    env = load_env_reference(SUITE_CONFIG.env)
    summary = improve(SUITE_CONFIG, env, tmp_path, lambda a, d: calc_learner(), log=quiet)
    assert summary["env"] == "calc,grid" and summary["env_version"] == env.version
    for agent in ("base", "final"):
        by_env = summary[agent]["by_env"]
        assert set(by_env) == {"calc", "grid"}
        assert all(set(metrics["by_difficulty"]) == {"1", "2"} for metrics in by_env.values())
        assert sum(m["n"] for m in by_env.values()) == summary[agent]["n"] == 24
    final = summary["final"]["by_env"]
    assert final["calc"]["pass@1"] > summary["base"]["by_env"]["calc"]["pass@1"] + 0.3
    assert final["grid"]["pass@1"] == 0.0
    first = summary["rounds"][0]
    assert set(first["curriculum"]["envs"]) == {"calc", "grid"}
    assert sum(first["curriculum"]["envs"].values()) == SUITE_CONFIG.train_tasks
    candidate = first["candidates"][0]
    groups = {g["group"]: g for g in candidate["groups"]}
    assert {"calc", "grid"} <= set(groups) and all(g["guarded"] for g in groups.values())
    assert groups["grid"]["flips_pass_to_fail"] == 0
    page = write_report(tmp_path).read_text()
    assert "By env" in page and "calc level 2" in page and "grid level 1" in page


def test_a_suite_run_resumes_by_the_suite_its_config_names(tmp_path):
    env = load_env_reference(SUITE_CONFIG.env)
    with pytest.raises(Interrupt):
        counted = {"n": 0}
        improve(SUITE_CONFIG, env, tmp_path, lambda a, d: calc_learner(40, counted), log=quiet)
    with Store(tmp_path) as store:
        before = {(t.task.id, t.agent, t.sample): i for i, t in store.trajectories()}
        stored = store.runs(kind="improve")[0].config
    assert {key[0].split("-")[0] for key in before} == {"calc,grid"}
    again = load_env_reference(stored["env"])  # what a resumed command line loads
    summary = improve(
        SUITE_CONFIG, again, tmp_path, lambda a, d: calc_learner(), resume=True, log=quiet
    )
    with Store(tmp_path) as store:
        after = {(t.task.id, t.agent, t.sample): i for i, t in store.trajectories()}
    assert all(after[key] == row for key, row in before.items())
    assert len(summary["rounds"]) == 2


def test_a_round_probes_more_tasks_when_the_incumbent_passed_too_much_for_a_gain_to_show(
    tmp_path,
):
    lines = []
    level_one = replace(CONFIG, max_difficulty=1)
    summary = improve(level_one, env, tmp_path, lambda a, d: learning_model(), log=lines.append)
    first, second = summary["rounds"]
    # Round 1's base was never probed: its practice samples stand for its probes.
    passed, played = first["exploration"]["roots"]
    threshold = first["alpha"] / len(first["candidates"])
    assert first["probe_size"] == probe_size(24, CONFIG.gate, threshold, passed / played) > 24
    assert f"its practice samples, {passed} of {played} passed" in "\n".join(lines)
    assert first["probe"] > 0.8 and second["candidates"]
    assert second["probe_size"] == second["probe_tasks"] > 24
    assert f"probe: {second['probe_size']} tasks, not 24" in "\n".join(lines)
    with Store(tmp_path) as store:
        probed = {t.task.id for _, t in store.trajectories(split="probe") if t.agent == "v1"}
    # v1 played both probes, no task twice
    assert len(probed) == first["probe_size"] + second["probe_size"]
    page = write_report(tmp_path).read_text()
    assert f"probe tasks ({first['probe_size']}, {second['probe_size']} in rounds 1-2" in page
    fixed = replace(level_one, gate=replace(CONFIG.gate, probe_growth=1))
    again = improve(fixed, env, tmp_path / "fixed", lambda a, d: learning_model(), log=quiet)
    assert [r["probe_size"] for r in again["rounds"]] == [24, 24]


def test_a_probe_over_a_level_just_opened_grows_for_the_tasks_the_incumbent_fails_there(
    tmp_path,
):
    summary = improve(CONFIG, env, tmp_path, lambda a, d: learning_model(), log=quiet)
    first, second = summary["rounds"]
    assert first["probe"] > 0.8 and second["candidates"]
    # Level 2 opened in round 2: the incumbent was never probed there, so it counts as
    # failing it, and a candidate that learned part of it needs more tasks to show.
    assert second["curriculum"]["probe_to"] == 2
    proposed = [c for c in second["candidates"] if c.get("version") is not None]
    threshold = second["alpha"] / len(proposed)
    expected = probe_size(24, CONFIG.gate, threshold, second["curriculum"]["probe"]["1"] / 2)
    assert second["probe_size"] == expected > 24
