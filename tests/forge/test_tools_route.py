import json
import os
from pathlib import Path

import pytest

from forge.jars import jars
from ratchet.core.env import FINISH
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.forge import ForgeConfig, ForgeRefused, forge_tools, load_forged
from ratchet.forge.package import TASKS_FILE
from ratchet.forge.tasks import forge_tasks, survey

JARS = str(Path(__file__).with_name("jars.py"))
SMALL = ForgeConfig(max_difficulty=2, tasks_per_level=60, check_tasks=6, split_draws=60)


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    out = tmp_path_factory.mktemp("forged") / "jars"
    return forge_tools(f"{JARS}:jars", out, SMALL)


def test_survey_sorts_tools_into_writes_and_reads():
    found = survey(jars)
    assert set(found.writes) == {"fill", "empty", "paint"}
    assert set(found.reads) == {"colour_of", "is_full"}


def test_a_schema_that_lists_a_worlds_contents_is_refused():
    from forge.jars import leaky

    with pytest.raises(ValueError, match="differ from world 0's"):
        survey(leaky)


def test_levels_count_state_changing_calls_and_drops_are_counted():
    pool, counts, _ = forge_tasks(jars, SMALL)
    tasks = [*pool.train, *pool.probe, *pool.test]
    for spec in tasks:
        if "calls" in spec.params:
            assert spec.difficulty == len(spec.params["calls"])
        else:
            assert spec.difficulty == 1 and spec.instruction.endswith("Answer with finish.")
    assert counts.questions > 0 and counts.dropped["duplicate problem"] > 0
    assert sum(counts.kept.values()) == len(tasks) == sum(counts.splits.values())
    paint = next(s for s in tasks if s.params.get("calls", [{}])[0].get("name") == "paint")
    call = paint.params["calls"][0]["arguments"]
    assert f"Paint jar {call['jar_id']} {call['colour']}." in paint.instruction


def test_forged_env_is_written_passes_check_and_loads_back(forged):
    assert forged.report.passed
    env = load_forged(forged.directory)
    assert env.name == "forge/jars" and env.version == forged.record["version"]
    record = json.loads((forged.directory / "forge.json").read_text())
    own = os.path.relpath(JARS, forged.directory)
    assert set(record["pins"]) == {TASKS_FILE, own} and record["source"]["file"] == own
    assert record["counts"]["kept"] and record["check"].endswith("passes all 16 checks")
    assert (forged.directory / "check.txt").read_text().startswith("pass")


def test_loading_refuses_a_source_changed_since_forging(forged, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for item in forged.directory.iterdir():
        (copy / item.name).write_bytes(item.read_bytes())
    tasks = json.loads((copy / TASKS_FILE).read_text())
    tasks["train"].pop()
    (copy / TASKS_FILE).write_text(json.dumps(tasks))
    with pytest.raises(ValueError, match=r"tasks\.json changed since the env was forged"):
        load_forged(copy)


def test_verifier_compares_states_and_questions_need_the_value_read(forged):
    env = forged.env
    tasks = env.tasks("train", 40, seed=1)
    action = next(t for t in tasks if "calls" in t.params)
    question = next(t for t in tasks if "ask" in t.params)
    assert replay(env, action, env.oracle(action)).passed
    assert not replay(env, action, [ToolCall(FINISH, {"answer": "done"})]).passed
    *calls, finish = env.oracle(question)
    right = finish.arguments["answer"]
    assert replay(env, question, env.oracle(question)).passed
    guessed = replay(env, question, [ToolCall(FINISH, {"answer": right})])
    assert not guessed.passed and "never read" in guessed.verdict.feedback
    wrong = replay(env, question, [*calls, ToolCall(FINISH, {"answer": right + "ish"})])
    assert not wrong.passed


def test_extra_changes_fail_an_action_task(forged):
    env = forged.env
    task = next(t for t in env.tasks("train", 40, seed=2) if "calls" in t.params)
    done = [c for c in env.oracle(task) if c.name != FINISH]
    touched = {c.arguments["jar_id"] for c in done}
    other = next(j for j in ("J1", "J2", "J3", "J4", "J5", "J6") if j not in touched)
    extra = [ToolCall("paint", {"jar_id": other, "colour": colour}) for colour in ("red", "blue")]
    trajectory = replay(env, task, [*done, *extra, ToolCall(FINISH, {"answer": "done"})])
    assert not trajectory.passed and "expected" in trajectory.verdict.feedback


def test_describe_names_what_an_episode_did(forged):
    env = forged.env
    task = next(t for t in env.tasks("train", 40, seed=3) if "calls" in t.params)
    world = task.params["world"]
    state = load_forged(forged.directory)
    colour = jars.open(world)["J3"]["colour"]
    new = next(c for c in ("red", "green", "blue") if c != colour)
    episode = replay(state, task, [ToolCall("colour_of", {"jar_id": "J3"}),
                                   ToolCall("paint", {"jar_id": "J3", "colour": new}),
                                   ToolCall(FINISH, {"answer": "done"})])  # fmt: skip
    spec = env.describe(episode)
    assert spec is not None and spec.params == {
        "world": world,
        "calls": [{"name": "paint", "arguments": {"jar_id": "J3", "colour": new}}],
    }
    assert spec.instruction == f"Paint jar J3 {new}. Then call finish." and spec.difficulty == 1
    asked = replay(state, task, [ToolCall("colour_of", {"jar_id": "J3"}),
                                 ToolCall(FINISH, {"answer": colour})])  # fmt: skip
    question = env.describe(asked)
    assert question is not None and question.params["ask"]["name"] == "colour_of"


def test_task_from_params_accepts_lasting_walks_only(forged):
    env = forged.env
    colour = jars.open(0)["J1"]["colour"]
    new = next(c for c in ("red", "green", "blue") if c != colour)
    paint = {"name": "paint", "arguments": {"jar_id": "J1", "colour": new}}
    spec = env.task_from_params({"world": 0, "calls": [paint]})
    assert spec.difficulty == 1
    back = {"name": "paint", "arguments": {"jar_id": "J1", "colour": colour}}
    with pytest.raises(ValueError, match="change the state for good"):
        env.task_from_params({"world": 0, "calls": [paint, back]})
    with pytest.raises(ValueError, match="'world'"):
        env.task_from_params({"world": 99, "calls": [paint]})


def test_a_source_that_fails_check_is_refused_and_nothing_written(tmp_path, monkeypatch):
    import ratchet.forge.procedural as procedural

    real = procedural.forged_env

    def lenient(*args, **kwargs):
        env = real(*args, **kwargs)
        return type(env)(**{**env.__dict__, "verify": lambda task, world, answer: _pass()})

    monkeypatch.setattr(procedural, "forged_env", lenient)
    with pytest.raises(ForgeRefused) as refused:
        forge_tools(f"{JARS}:jars", tmp_path / "out", SMALL)
    assert "FAIL  null scores below the oracle" in refused.value.report
    assert not (tmp_path / "out").exists()


def _pass():
    from ratchet.core.verdict import Verdict

    return Verdict.of(True, "anything goes")


def test_a_reference_to_something_else_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a forge Source"):
        forge_tools("json:dumps", tmp_path / "x", SMALL)


def test_out_holding_other_files_is_not_overwritten(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a forged env"):
        forge_tools(f"{JARS}:jars", out, SMALL)
    assert (out / "notes.txt").read_text() == "keep me"


def test_walks_are_seeded():
    config = ForgeConfig(max_difficulty=1, tasks_per_level=10)
    first, _, _ = forge_tasks(jars, config)
    again, _, _ = forge_tasks(jars, config)
    other, _, _ = forge_tasks(jars, ForgeConfig(max_difficulty=1, tasks_per_level=10, seed=1))
    assert first.train == again.train and first.train != other.train
