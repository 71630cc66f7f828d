from collections import Counter
from dataclasses import replace

import pytest

from ratchet.core.agent import Agent
from ratchet.core.env import Env, split_of_params
from ratchet.core.task import split_of
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs import registry
from ratchet.envs.calc import env as calc
from ratchet.envs.check import check_splits
from ratchet.envs.files import env as files
from ratchet.envs.grid import env as grid
from ratchet.envs.registry import EnvLoadError, UnknownEnvError, load_env_reference
from ratchet.envs.suite import Suite
from ratchet.improve.hindsight import relabel
from ratchet.improve.levers.tasks import validate

SUITE = Suite((calc, grid))


def test_tasks_are_drawn_evenly_and_name_their_member():
    tasks = SUITE.tasks("probe", 10, seed=2, difficulty=1)
    members = [task.params["suite_member"] for task in tasks]
    assert Counter(members) == {"calc": 5, "grid": 5}
    assert members[:2] == ["calc", "grid"]  # the members take turns
    assert all(task.env == "calc,grid" and task.split == "probe" for task in tasks)
    for task, member in zip(tasks, members, strict=True):
        assert task.family.startswith(member + "/") and task.problem.startswith(member + ":")
    # Each member's share is what the member itself draws with that seed.
    own = {t.id for t in calc.tasks("probe", 5, seed=2, difficulty=1)}
    assert {SUITE.unwrap(t)[1].id for t in tasks if t.params["suite_member"] == "calc"} == own
    assert len({t.id for t in tasks}) == 10


def test_a_draw_is_a_prefix_of_a_longer_one_and_seeds_start_with_other_members():
    seven = SUITE.tasks("train", 7, seed=4, difficulty=1)
    assert SUITE.tasks("train", 6, seed=4, difficulty=1) == seven[:6]
    firsts = [SUITE.tasks("train", 1, seed=s, difficulty=1)[0] for s in (0, 1)]
    assert {task.params["suite_member"] for task in firsts} == {"calc", "grid"}


def test_a_level_only_one_member_has_draws_from_it():
    assert SUITE.max_difficulty == max(calc.max_difficulty, grid.max_difficulty)
    top = max(calc.max_difficulty, grid.max_difficulty)
    if calc.max_difficulty != grid.max_difficulty:
        higher = calc if calc.max_difficulty > grid.max_difficulty else grid
        tasks = SUITE.tasks("test", 3, difficulty=top)
        assert {t.params["suite_member"] for t in tasks} == {higher.name}
    with pytest.raises(ValueError, match=r"must be in 1\.\."):
        SUITE.tasks("test", 3, difficulty=top + 1)


def test_sessions_oracles_and_splits_are_the_members():
    for task in SUITE.tasks("test", 6, seed=1, difficulty=1):
        assert replay(SUITE, task, SUITE.oracle(task)).passed
        assert not replay(SUITE, task, [ToolCall("finish", {"answer": ""})]).passed
        member, own = SUITE.unwrap(task)
        assert split_of_params(SUITE, task.params) == task.split == own.split
        assert split_of(own.problem) == own.split
        assert SUITE.problem_key(task.params) == f"{member.name}:{own.problem}"


def test_the_version_pins_every_member():
    bumped = replace(calc, version=calc.version + "-changed")
    assert Suite((bumped, grid)).version != SUITE.version
    assert Suite((calc, grid)).version == SUITE.version
    assert isinstance(SUITE, Env)


def test_the_splits_stay_disjoint_across_the_suite():
    drawn = check_splits(Suite((calc, files)), 20, 0)
    assert "none in two splits" in drawn


def test_hindsight_and_proposed_tasks_keep_the_members_split():
    task = next(t for t in SUITE.tasks("train", 20, seed=3, difficulty=3) if "calc" in t.family)
    successes, held_out = [], set()
    for b in range(1, 60):  # failed calc episodes that computed 2 + b
        wandering = replay(SUITE, task, [ToolCall("add", {"a": 2, "b": b})])
        learned = relabel(SUITE, wandering, Agent(model="fake"))
        successes += learned.successes
        held_out |= learned.held_out
    assert successes and held_out  # both kinds were met, so the split was asked
    for success in successes:
        assert success.passed and success.task.env == "calc,grid"
        assert success.task.split == "train" == split_of_params(calc, success.task.params["params"])
        assert success.task.family.startswith("calc/")
    chain = {key: task.params["params"][key] for key in ("start", "steps")}
    made = validate(SUITE, {"suite_member": "calc", "params": chain}, set(), 5, task.difficulty)
    assert not isinstance(made, str), made
    assert made.problem == task.problem and made.split == "train" and made.family == task.family
    assert validate(SUITE, {"suite_member": "nope", "params": {}}, set(), 5) == "invalid params"


def test_a_suite_needs_two_distinct_members():
    with pytest.raises(ValueError, match="at least two"):
        Suite((calc,))
    with pytest.raises(ValueError, match="calc came twice"):
        Suite((calc, calc))


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(registry, "_loaded", {})


def test_a_comma_separated_reference_loads_a_suite(fresh_cache):
    suite = load_env_reference("calc, grid")
    assert isinstance(suite, Suite) and suite.name == "calc,grid"
    assert load_env_reference("calc, grid") is suite


@pytest.mark.parametrize(
    ("reference", "error", "message"),
    [
        ("calc,,grid", UnknownEnvError, "has an empty item"),
        ("calc,", UnknownEnvError, "has an empty item"),
        ("calc,nope", UnknownEnvError, "in the env list 'calc,nope': unknown env 'nope'"),
        ("calc,missing_file.py:env", EnvLoadError, "no env file missing_file.py"),
        ("calc,no_such_module_xyz:env", EnvLoadError, "in the env list .*failed to load"),
        ("calc,calc", EnvLoadError, "calc came twice"),
    ],
)
def test_bad_env_lists_get_clear_errors(fresh_cache, reference, error, message):
    with pytest.raises(error, match=message):
        load_env_reference(reference)
