import pytest

from ratchet.core.agent import Agent
from ratchet.engine.models.fake import FakeModel
from ratchet.envs.calc import env
from ratchet.improve.levers import make_play


def test_levers_play_training_tasks_only_and_their_episodes_are_recorded():
    recorded = []
    play = make_play(env, FakeModel(), record=recorded.extend, label="mine")
    played = play(Agent(model="fake"), env.tasks("train", 2), 2)
    assert recorded == played and len(played) == 4
    assert {t.metadata["lever"] for t in played} == {"mine"}
    with pytest.raises(ValueError, match="training tasks only"):
        play(Agent(model="fake"), env.tasks("probe", 1), 1)
