from dataclasses import replace

from ratchet.core.agent import Exemplar
from ratchet.core.memory import ExemplarIndex, Skill, select_skills, to_exemplar
from ratchet.core.task import member_of
from ratchet.engine.harness import replay
from ratchet.envs.calc import env
from ratchet.envs.grid import env as grid
from ratchet.envs.suite import Suite


def exemplar(task):
    return Exemplar(task.env, task.family, task.difficulty, task.instruction, ())


def test_similar_tasks_rank_first_and_the_task_itself_is_never_shown():
    pool = env.tasks("train", 40)
    index = ExemplarIndex([exemplar(t) for t in pool])
    query = pool[7]
    chosen = index.select(query, 3)
    assert len(chosen) == 3
    assert query.instruction not in {e.instruction for e in chosen}
    assert chosen[0].family == query.family  # the wording alone finds its kind


def test_other_envs_and_empty_pools_give_nothing():
    task = env.tasks("test", 1)[0]
    other = Exemplar("shop", "cancel", 1, task.instruction + " elsewhere", ())
    assert ExemplarIndex([other]).select(task, 2) == ()
    assert ExemplarIndex([]).select(task, 2) == ()


def _turns(*tools):
    calls = [{"type": "function", "function": {"name": t, "arguments": "{}"}} for t in tools]
    return ({"role": "assistant", "content": "", "tool_calls": calls},)


def test_retrieval_reads_only_what_the_agent_sees_never_the_hidden_labels():
    # The family and difficulty come from the task generator: the agent never sees them, so at
    # probe and test time they must not steer which demonstrations it gets.
    pool = env.tasks("train", 60)
    index = ExemplarIndex([exemplar(t) for t in pool])
    for query in env.tasks("test", 12):
        chosen = index.select(query, 3)
        for family, difficulty in (("word", 1), ("expression", 5), ("unseen", 3)):
            relabelled = replace(query, family=family, difficulty=difficulty)
            assert index.select(relabelled, 3) == chosen, (query.instruction, family)


def test_the_offered_tools_steer_retrieval():
    task = env.tasks("test", 1)[0]
    same_words = "Use the tools to find the value."
    by_add = Exemplar("calc", "x", 1, same_words, _turns("add", "finish"))
    by_divide = Exemplar("calc", "y", 1, same_words + " ", _turns("divide", "finish"))
    index = ExemplarIndex([by_add, by_divide])
    asked = replace(task, instruction=same_words + "  ")
    assert index.select(asked, 1, tools=("divide", "finish"))[0] is by_divide
    assert index.select(asked, 1, tools=("add", "finish"))[0] is by_add


def test_skills_are_chosen_without_the_hidden_labels():
    skill = Skill("add_then_finish", "", "calc", {}, (), families=("word",), difficulty=1,
                  examples=("Ben has 3 apples. Then Ben gets 4 more.",))  # fmt: skip
    other = Skill("multiply_then_finish", "", "calc", {}, (), families=("expression",),
                  difficulty=4, examples=("Compute 3 * 4.",))  # fmt: skip
    task = replace(env.tasks("test", 1)[0], instruction="Ana has 2 apples. Then Ana gets 9 more.")
    for family, difficulty in (("word", 1), ("expression", 4)):
        labelled = replace(task, family=family, difficulty=difficulty)
        assert select_skills([other, skill], labelled, 1) == (skill,)


def test_a_suite_task_is_shown_exemplars_and_skills_of_its_own_member_only():
    suite = Suite((env, grid))
    calc_tasks, grid_tasks = (
        [t for t in suite.tasks("train", 20) if member_of(t) == name] for name in ("calc", "grid")
    )
    played = [replay(suite, task, suite.oracle(task)) for task in calc_tasks[:5] + grid_tasks[:5]]
    index = ExemplarIndex([to_exemplar(t) for t in played])
    for task in (calc_tasks[9], grid_tasks[9]):
        chosen = index.select(task, 10)
        assert len(chosen) == 5 and {e.env for e in chosen} == {member_of(task)}
    skills = [Skill(f"{name}_skill", "", name, {}, ()) for name in ("calc", "grid")]
    assert [s.env for s in select_skills(skills, grid_tasks[0], 2)] == ["grid"]
