"""One tiny improvement round per lever on the embedded model (slow: loads and trains it)."""

import json
from dataclasses import replace

import pytest

from fakes import lever_context
from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import Budget, replay
from ratchet.engine.rollout import RolloutConfig
from ratchet.envs.calc import env
from ratchet.improve.config import ImproveConfig
from ratchet.improve.levers.grpo import GrpoLever
from ratchet.improve.levers.pairs import PairsLever
from ratchet.improve.levers.rft import RftLever
from ratchet.improve.loop import improve

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def local():
    from ratchet.engine.models.local import LocalModel

    return LocalModel(threads=1)


def tiny(lever):
    return ImproveConfig(
        env="calc",
        model="local",
        levers=(lever,),
        rounds=1,
        train_tasks=4,
        train_k=2,
        probe_tasks=6,  # 4 could never reach p <= 0.05, and improve refuses it
        test_tasks=4,
        max_difficulty=1,
        train_steps=2,
        curve=False,
        rollout=RolloutConfig(concurrency=8, max_reply_tokens=40, budget=Budget(max_turns=3)),
    )


def backends(local):
    made = {}

    def backend(agent, directory):
        if agent.adapter is None:
            return local
        from ratchet.engine.models.local import LocalModel

        path = str(agent.adapter_path(directory))
        return made.setdefault(agent.version, LocalModel(adapter=path, threads=1))

    return backend


@pytest.mark.parametrize("lever", ["exemplars", "insights", "rft", "pairs", "grpo"])
def test_one_tiny_round(lever, local, tmp_path):
    summary = improve(tiny(lever), env, tmp_path, backends(local), log=lambda line: None)
    record = summary["rounds"][0]
    assert record["train_episodes"] == 8
    assert [c["lever"] for c in record["candidates"]] == [lever]
    assert json.loads((tmp_path / "summary.json").read_text())["final"]["n"] == 4


def lora_b(directory):
    from safetensors.torch import load_file

    weights = load_file(str(directory / "adapter_model.safetensors"))
    return {name: w for name, w in weights.items() if "lora_B" in name}


def context(experience, workdir, incumbent=None, incumbent_dir=None):
    from ratchet.engine.models.training import LocalTrainer

    incumbent = incumbent or Agent(model="local")
    return lever_context(
        experience,
        workdir,
        trainer=LocalTrainer(),
        incumbent=incumbent,
        incumbent_dir=incumbent_dir,
    )


def mixed_groups():
    """Each task played twice: once solved (the oracle), once answered wrong at once."""
    episodes = []
    for task in env.tasks("train", 4, difficulty=1):
        episodes.append(replay(env, task, env.oracle(task)))
        wrong = replay(env, task, [ToolCall("finish", {"answer": "-1"})])
        episodes.append(replace(wrong, sample=1))
    return episodes


def test_rft_moves_the_adapter_weights(tmp_path):
    successes = [t for t in mixed_groups() if t.passed]
    candidate = RftLever(steps=2, batch_size=4).propose(context(successes, tmp_path))
    assert candidate is not None and candidate.adapter == "adapter"
    assert any(float(w.abs().sum()) > 0 for w in lora_b(tmp_path / "adapter").values())


@pytest.mark.parametrize(
    "lever", [PairsLever(steps=3, batch_size=2), GrpoLever(steps=3, batch_size=2)]
)
def test_pairs_and_grpo_continue_the_incumbents_adapter_and_move_it(lever, local, tmp_path):
    # The incumbent: an rft adapter (warm start), which pairs and grpo continue.
    rft_dir = tmp_path / "v0"
    successes = [t for t in mixed_groups() if t.passed]
    RftLever(steps=2, batch_size=2).propose(context(successes, rft_dir))
    incumbent = Agent(version="v0", model="local", adapter="adapter")
    workdir = tmp_path / "v1"
    workdir.mkdir()
    # grpo learns from the incumbent's own samples only: these are v0's.
    played = [replace(t, agent="v0") for t in mixed_groups()]
    candidate = lever.propose(context(played, workdir, incumbent, rft_dir))
    assert candidate is not None and candidate.notes["trained_on"] > 0
    before, after = lora_b(rft_dir / "adapter"), lora_b(workdir / "adapter")
    assert before.keys() == after.keys()
    assert any(float((after[k] - before[k]).abs().sum()) > 0 for k in before)
    from ratchet.engine.models.local import LocalModel

    model = LocalModel(adapter=str(workdir / "adapter"), threads=1)
    played = replay(env, env.tasks("train", 1)[0], [])
    from ratchet.engine.models import Prompt, Sampling

    reply = model.complete([Prompt(played.messages[:2], played.tools)], Sampling(0, 40))[0]
    assert reply.error is None and json.loads(reply.text)["name"]
