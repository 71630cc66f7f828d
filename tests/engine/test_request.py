from ratchet.core.agent import Agent
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.request import RolloutRequest
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.calc import env

TASKS = env.tasks("train", 3, seed=4)


def test_a_request_played_here_is_the_rollout_of_its_arguments():
    seen = []
    skip = {(TASKS[0].id, 1)}
    request = RolloutRequest(
        env,
        TASKS,
        Agent(model="fake"),
        RolloutConfig(concurrency=2),
        k=2,
        seed=11,
        first_sample=1,
        skip=skip,
        on_trajectory=seen.append,
    )
    played = request.play(FakeModel())
    direct = rollout(
        env, TASKS, Agent(model="fake"), FakeModel(), RolloutConfig(concurrency=2),
        k=2, seed=11, first_sample=1, skip=skip,
    )  # fmt: skip
    pairs = [(t.task.id, t.sample) for t in played]
    assert pairs == [(t.task.id, t.sample) for t in direct] == [
        (TASKS[0].id, 2), (TASKS[1].id, 1), (TASKS[1].id, 2), (TASKS[2].id, 1), (TASKS[2].id, 2)
    ]  # fmt: skip
    assert [[s.output for s in t.steps] for t in played] == [
        [s.output for s in t.steps] for t in direct
    ]
    assert [(t.task.id, t.sample) for t in seen] == pairs
