"""One tiny improvement round per lever on the embedded model (slow: loads and trains it)."""

import json

import pytest

from ratchet.core.agent import Agent
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.improve.config import ImproveConfig
from ratchet.improve.levers import LeverContext
from ratchet.improve.levers.rft import RftLever
from ratchet.improve.loop import improve

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def local():
    from ratchet.engine.models.local import LocalModel

    return LocalModel()


@pytest.mark.parametrize("lever", ["exemplars", "insights", "rft"])
def test_one_tiny_round(lever, local, tmp_path):
    config = ImproveConfig(
        env="calc",
        model="local",
        levers=(lever,),
        rounds=1,
        train_tasks=6,
        train_k=1,
        probe_tasks=6,  # 4 could never reach p <= 0.05, and improve refuses it
        test_tasks=4,
        max_difficulty=1,
        max_turns=3,
        max_reply_tokens=40,
        rft_steps=2,
        curve=False,
    )
    backends = {}

    def backend(agent, directory):
        if agent.adapter is None:
            return local
        from ratchet.engine.models.local import LocalModel

        return backends.setdefault(
            agent.version, LocalModel(adapter=str(directory / agent.adapter))
        )

    summary = improve(config, env, tmp_path, backend, log=lambda line: None)
    record = summary["rounds"][0]
    assert record["train_episodes"] == 6
    assert [c["lever"] for c in record["candidates"]] == [lever]
    assert json.loads((tmp_path / "summary.json").read_text())["final"]["n"] == 4


def test_rft_moves_the_adapter_weights(local, tmp_path):
    tasks = env.tasks("train", 8, difficulty=1)
    successes = [replay(env, t, env.oracle(t)) for t in tasks]
    context = LeverContext(
        env=env,
        incumbent=Agent(model="local"),
        experience=successes,
        model=local,
        reflector=None,
        trainer=None,
        workdir=tmp_path,
        version="v1",
    )
    candidate = RftLever(steps=2, batch_size=4).propose(context)
    assert candidate is not None and candidate.adapter == "adapter"
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    lora_b = [w for name, w in weights.items() if "lora_B" in name]
    assert lora_b and any(float(w.abs().sum()) > 0 for w in lora_b)  # B starts at zero
