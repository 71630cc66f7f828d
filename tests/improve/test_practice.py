from types import SimpleNamespace

from ratchet.core.env import SimpleEnv
from ratchet.core.pool import TaskPool
from ratchet.core.task import TaskSpec
from ratchet.core.verdict import Verdict
from ratchet.envs.calc import env
from ratchet.improve.config import ImproveConfig
from ratchet.improve.practice import Practice


def practice(environment, config, rounds):
    run = SimpleNamespace(config=config, rounds=rounds)
    return Practice(run=run, env=environment, backends=None)


def round_record(probe_to):
    return {"curriculum": {"probe_to": probe_to}}


def test_each_round_probes_tasks_no_earlier_round_probed():
    config = ImproveConfig(env="calc", probe_tasks=24, max_difficulty=2)
    records = [round_record(1), round_record(2)]
    rounds = [
        practice(env, config, records[: n - 1]).probe_tasks(n, 2 if n > 1 else 1) for n in (1, 2, 3)
    ]
    ids = [{task.id for task in probe.tasks} for probe in rounds]
    assert [len(i) for i in ids] == [24, 24, 24]
    assert not ids[0] & ids[1] and not ids[0] & ids[2] and not ids[1] & ids[2]
    assert all(not probe.reused for probe in rounds)
    assert {t.difficulty for t in rounds[1].tasks} == {1, 2}
    # A resumed round draws the same probe.
    again = practice(env, config, records[:1]).probe_tasks(2, 2)
    assert [t.id for t in again.tasks] == [t.id for t in rounds[1].tasks]


def test_a_probe_split_too_small_for_fresh_tasks_is_reused_and_says_which():
    specs = [TaskSpec(f"Say {n}.", {"n": n}) for n in range(60)]
    pooled = SimpleEnv(
        name="pool",
        description="a benchmark with 10 probe problems",
        sample=TaskPool(train=specs[:40], probe=specs[40:50], test=specs[50:]),
        build=lambda task: None,
        tools=lambda world: [],
        verify=lambda task, world, answer: Verdict.of(answer == str(task.params["n"])),
        oracle=lambda task: [],
    )
    config = ImproveConfig(env="pool", probe_tasks=8, max_difficulty=1)
    first = practice(pooled, config, []).probe_tasks(1, 1)
    second = practice(pooled, config, [round_record(1)]).probe_tasks(2, 1)
    assert not first.reused and len(second.tasks) == 8
    assert set(second.reused) == {t.id for t in second.tasks} & {t.id for t in first.tasks}
    assert len(second.reused) == 6  # 10 problems: 2 fresh ones are not enough
