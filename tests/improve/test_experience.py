from dataclasses import replace

import pytest

from ratchet.core.agent import Agent
from ratchet.engine.harness import replay
from ratchet.engine.models.base import Completion
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig
from ratchet.engine.store import Store
from ratchet.envs.calc import env
from ratchet.improve.config import ImproveConfig
from ratchet.improve.experience import verified_experience
from ratchet.improve.loop import improve
from ratchet.serve.recorder import Recorder, Turn

FINISH = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "finish", "arguments": '{"answer": "5"}'},
        }
    ],
}


def record_traffic(root, verdicts):
    """A serve store with one conversation per verdict (None: no feedback)."""
    with Store(root) as store:
        recorder = Recorder(store, Agent(model="fake"), "calc", {})
        for number, verdict in enumerate(verdicts):
            messages = [{"role": "user", "content": f"What is {number} + 5?"}]
            turn = Turn(messages, messages, (), FINISH, Completion(""), "base", "fake")
            recorder.record(f"c{number}", turn)
            if verdict is not None:
                recorder.feedback(f"c{number}", float(verdict), verdict, "")
        recorder.close()


def test_only_verified_train_only_episodes_are_taken(tmp_path):
    record_traffic(tmp_path / "traffic", [True, False, None])
    train = env.tasks("train", 2, seed=0)
    probe = env.tasks("probe", 1, seed=0)[0]
    oracle = Agent(version="oracle")
    with Store(tmp_path / "traffic") as store:
        run = store.start_run("run", {})
        store.add_trajectories(run, [replay(env, t, env.oracle(t), oracle) for t in train])
        # A probe problem stored under the train split must still be left out.
        disguised = replace(probe, split="train", id="calc-disguised")
        store.add_trajectory(run, replay(env, disguised, env.oracle(probe), oracle))
    found = verified_experience(tmp_path / "traffic", "calc")
    served = [t for t in found if t.task.family == "served"]
    assert [t.passed for t in served] == [True, False]  # the unverified one is left out
    assert all(t.task.env == "calc" and t.task.split == "train" for t in served)
    assert {t.task.id for t in found if t.task.family != "served"} == {t.id for t in train}
    assert verified_experience(tmp_path / "traffic", "shop") == []
    with pytest.raises(ValueError, match="holds no store"):
        verified_experience(tmp_path / "nothing", "calc")


def test_improve_learns_from_recorded_traffic_and_never_replays_it(tmp_path):
    record_traffic(tmp_path / "traffic", [True, True])
    config = ImproveConfig(
        env="calc",
        model="fake",
        levers=("exemplars",),
        rounds=1,
        train_tasks=4,
        train_k=1,
        probe_tasks=8,
        test_tasks=4,
        experience=str(tmp_path / "traffic"),
        rollout=RolloutConfig(concurrency=4),
    )
    lines = []
    improve(config, env, tmp_path / "run", lambda agent, directory: FakeModel(), log=lines.append)
    assert any("2 verified episodes" in line for line in lines)
    with Store(tmp_path / "run") as store:
        [imported] = store.runs(kind="experience")
        [run] = store.runs(kind="improve")
        assert store.count_trajectories(imported.id) == 2
        played = store.trajectories(run.id)
    assert played and not any(t.task.family == "served" for _, t in played)  # never replayed
    candidate = (tmp_path / "run" / "agents" / "v1" / "agent.json").read_text()
    assert "What is 0 + 5?" in candidate  # the exemplars lever used the recorded success
