import json
from dataclasses import replace

import pytest

from fakes import solve_calc
from ratchet.core.agent import Agent
from ratchet.core.pool import TaskPool
from ratchet.core.task import TaskSpec, make_task
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig
from ratchet.envs.calc import env, from_params
from ratchet.improve.levers import LeverContext, make_play
from ratchet.improve.levers.tasks import (
    ModelProposer,
    TaskLever,
    TaskRequest,
    VariantProposer,
    failure_clusters,
    validate,
)

TASKS = env.tasks("train", 12, difficulty=2)
TASKS_AS_SPECS = [TaskSpec(t.instruction, t.params, t.family, t.difficulty) for t in TASKS]


def failures():
    return [replay(env, t, [ToolCall("finish", {"answer": "0"})]) for t in TASKS]


def chain(split):
    """Params of a one-step chain whose problem falls in ``split``."""
    for start in range(1, 999):
        params = {"start": start, "steps": [["add", 3]]}
        if make_task("calc", from_params(params), difficulty=1).split == split:
            return params
    raise AssertionError(f"no {split} chain found")


def solver(skip=lambda task: False):
    def reply(prompt, rng):
        task = [m["content"] for m in prompt.messages if m["role"] == "user"][-1]
        answer = "-1" if skip(task) else str(solve_calc(task))
        return json.dumps({"name": "finish", "arguments": {"answer": answer}})

    return FakeModel(reply=reply)


def test_every_proposal_is_validated_and_rejections_have_reasons():
    known = {t.problem for t in TASKS}
    train = chain("train")
    assert validate(env, train, known, ceiling=2).split == "train"
    assert validate(env, chain("probe"), known, ceiling=2) == "probe or test problem"
    assert validate(env, chain("test"), known, ceiling=2) == "probe or test problem"
    assert validate(env, TASKS[0].params | {"answer": 1}, known, 2) == "invalid params"
    own = {"start": TASKS[0].params["start"], "steps": TASKS[0].params["steps"]}
    assert validate(env, own, known, ceiling=2) == "duplicate"
    assert validate(env, {"start": 3, "steps": [["divide", 2]]}, known, 2) == "invalid params"
    assert validate(env, "not params", known, ceiling=2) == "invalid params"
    long = {"start": 3, "steps": [["add", 1]] * 4}
    assert validate(env, long, known, ceiling=2) in ("too hard", "probe or test problem")


def test_validation_never_asks_the_oracle():
    def no_oracle(task):
        raise AssertionError("the oracle was asked")

    task = validate(replace(env, oracle=no_oracle), chain("train"), set(), ceiling=2)
    assert not isinstance(task, str) and task.split == "train"


def test_a_pool_s_probe_or_test_problem_is_never_a_training_task():
    # A fixed pool keeps its own splits: a test problem whose key hashes to train stays test.
    held = [chain("train"), {"start": 5, "steps": [["multiply", 2]]}]
    specs = [from_params(params) for params in held]
    pool_env = replace(env, sample=TaskPool(train=TASKS_AS_SPECS, probe=specs[1:], test=specs[:1]))
    assert make_task("calc", specs[0], difficulty=1).split == "train"  # by hash
    for params in held:
        assert validate(pool_env, params, set(), ceiling=2) == "probe or test problem"
    novel = validate(pool_env, {"start": 6, "steps": [["add", 2]]}, set(), ceiling=2)
    assert not isinstance(novel, str) and novel.split == "train"  # in no split of the pool


def test_a_passing_null_or_forged_claim_rejects_the_task():
    params = chain("train")
    credulous = replace(env, verify=lambda task, world, answer: Verdict.of(True))
    assert validate(credulous, params, set(), ceiling=2) == "null policy passes"

    def forgeable(task, world, answer):
        return Verdict.of(answer is not None and answer != "")

    gullible = replace(env, verify=forgeable, oracle=env.oracle)
    assert validate(gullible, params, set(), ceiling=2) == "forged claim passes"


def test_failures_cluster_by_family_difficulty_and_error():
    clusters = failure_clusters(failures(), "scripted", "calc")
    assert sum(c.failures for c in clusters) == len(TASKS)
    assert {(c.family, c.difficulty) for c in clusters} <= {("expression", 2), ("word", 2)}
    assert all(c.error == "submitted N, which is not the correct value" for c in clusters)
    assert all(c.success_rate == 0 and c.target == 1 for c in clusters)  # easier variants


def test_the_lever_offers_valid_tasks_and_learns_only_from_the_ones_practice_solved(tmp_path):
    offered, recorded = [], []
    model = solver(skip=lambda task: "5" in task)  # some proposals stay unsolved
    context = LeverContext(
        env=env,
        incumbent=Agent(model="fake"),
        experience=failures(),
        model=model,
        reflector=None,
        trainer=None,
        workdir=tmp_path,
        version="v1",
        play=make_play(
            env, model, RolloutConfig(concurrency=2), record=recorded.extend, label="tasks"
        ),
        offer_tasks=lambda tasks, rejected: offered.append((list(tasks), dict(rejected))),
    )
    candidate = TaskLever(proposer=VariantProposer()).propose(context)
    ((tasks, rejected),) = offered
    known = {t.problem for t in TASKS}
    assert tasks and all(t.split == "train" and t.problem not in known for t in tasks)
    assert all(t.difficulty == 1 for t in tasks)  # one lower: the agent never succeeds at 2
    assert len(tasks) + sum(rejected.values()) == 2 * TaskLever().per_cluster
    assert len(recorded) == TaskLever().practice_k * len(tasks)
    assert all(t.metadata["lever"] == "tasks" for t in recorded)
    # A proposal counts once a verified episode solves it: only those are demonstrations.
    solved = {t.task.id for t in recorded if t.passed}
    assert 0 < len(solved) < len(tasks)
    assert candidate is not None and candidate.lever == "tasks"
    assert candidate.notes["tasks_offered"] == len(tasks)
    assert candidate.notes["tasks_solved"] == len(solved)
    shown = {e.instruction for e in candidate.exemplars}
    assert shown == {t.instruction for t in tasks if t.id in solved}


def test_a_model_proposer_writes_params_through_a_tool_call():
    reply = {"name": "propose_tasks", "arguments": {"tasks": [chain("train"), {"start": 0}]}}
    model = FakeModel(script=[json.dumps(reply)])
    clusters = failure_clusters(failures(), "scripted", "calc")
    request = TaskRequest("calc", clusters[0], 2, env.params_schema)
    proposals = ModelProposer(model)(request)
    assert proposals == reply["arguments"]["tasks"]
    verdicts = [validate(env, p, set(), ceiling=2) for p in proposals]
    assert verdicts[0].split == "train" and verdicts[1] == "invalid params"
    assert ModelProposer(FakeModel(script=["no call"]))(request) == []


def test_an_env_that_cannot_build_tasks_is_a_clear_error(tmp_path):
    context = LeverContext(
        env=replace(env, task_from_params=None),
        incumbent=Agent(model="fake"),
        experience=failures(),
        model=None,
        reflector=None,
        trainer=None,
        workdir=tmp_path,
        version="v1",
    )
    with pytest.raises(ValueError, match="task_from_params"):
        TaskLever().propose(context)
