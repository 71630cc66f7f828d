from ratchet.core.agent import Exemplar
from ratchet.core.memory import ExemplarIndex
from ratchet.envs.calc import env


def exemplar(task):
    return Exemplar(task.env, task.family, task.difficulty, task.instruction, ())


def test_similar_tasks_rank_first_and_the_task_itself_is_never_shown():
    pool = env.tasks("train", 40)
    index = ExemplarIndex([exemplar(t) for t in pool])
    query = pool[7]
    chosen = index.select(query, 3)
    assert len(chosen) == 3
    assert query.instruction not in {e.instruction for e in chosen}
    assert chosen[0].family == query.family


def test_other_envs_and_empty_pools_give_nothing():
    task = env.tasks("test", 1)[0]
    other = Exemplar("shop", "cancel", 1, task.instruction + " elsewhere", ())
    assert ExemplarIndex([other]).select(task, 2) == ()
    assert ExemplarIndex([]).select(task, 2) == ()
