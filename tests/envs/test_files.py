import random
import re
from dataclasses import replace

import pytest

from fakes import describe_task
from ratchet.core.task import make_task
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs.check import FORGED_CLAIM, check_env
from ratchet.envs.files import env, workspace
from ratchet.envs.files.tasks import FAMILIES
from ratchet.envs.files.world import PEOPLE, SERVICES, generate
from ratchet.sandbox import landlock_abi

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")


def _task(family, index=0):
    return [t for t in env.tasks("test", 150) if t.family == family][index]


def test_workspace_is_deterministic_from_the_seed():
    assert generate(7, 3) == generate(7, 3)
    assert generate(7, 3) != generate(8, 3)
    assert len(generate(1, 5).files) > len(generate(1, 1).files)


def test_thousands_of_distinct_tasks_and_every_family():
    tasks = env.tasks("train", 2000)
    assert len({(t.instruction, str(t.params)) for t in tasks}) == 2000
    assert len({t.instruction for t in tasks}) > 800
    assert {t.family for t in tasks} == set(FAMILIES)


def test_paths_are_confined_to_the_workspace():
    task = env.tasks("test", 1)[0]
    session = env.session(task)
    try:
        session.reset()
        for path in ("/etc/passwd", "../secret", "logs/../../x", "~/x"):
            assert session.step(ToolCall("read_file", {"path": path})).error
            assert session.step(ToolCall("write_file", {"path": path, "content": "x"})).error
        config = next(p for p in generate(**task.params["world"]).files if p.endswith(".json"))
        swap = f"rm {config} && ln -s /etc/passwd {config}"
        assert session.step(ToolCall("run", {"command": swap})).error is None
        read = session.step(ToolCall("read_file", {"path": config}))
        assert "outside the workspace" in read.text
    finally:
        session.close()


def _session_with_links(secret):
    session = env.session(env.tasks("test", 1)[0])
    session.reset()
    command = f"ln -s {secret} file-link; ln -s {secret.parent} dir-link"
    assert session.step(ToolCall("run", {"command": command})).error is None
    return session


def test_search_does_not_follow_links_made_with_run(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE\n")
    session = _session_with_links(secret)
    try:
        for path in (".", "file-link", "dir-link"):
            found = session.step(ToolCall("search", {"pattern": "TOP-SECRET", "path": path}))
            assert "TOP-SECRET-VALUE" not in found.text, path
    finally:
        session.close()


def test_list_files_shows_no_size_of_outside_files(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("x" * 48611)
    session = _session_with_links(secret)
    try:
        listing = session.step(ToolCall("list_files", {"path": "."})).text
        assert "48611" not in listing
        assert "file-link (link)" in listing and "dir-link (link)" in listing
        assert session.step(ToolCall("list_files", {"path": "dir-link"})).error
    finally:
        session.close()


def test_no_file_tool_reads_writes_or_moves_through_a_link(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    session = _session_with_links(secret)
    calls = [
        ToolCall("read_file", {"path": "file-link"}),
        ToolCall("read_file", {"path": "dir-link/secret.txt"}),
        ToolCall("write_file", {"path": "dir-link/planted.txt", "content": "x"}),
        ToolCall("move_file", {"source": "dir-link/secret.txt", "destination": "stolen.txt"}),
        ToolCall("move_file", {"source": "file-link", "destination": "dir-link/"}),
        ToolCall("delete_file", {"path": "dir-link/secret.txt"}),
    ]
    try:
        for call in calls:
            observation = session.step(call)
            assert observation.error and "TOP-SECRET-VALUE" not in observation.text, call
        session.step(ToolCall("write_file", {"path": "file-link", "content": "mine"}))
        found = session.step(ToolCall("search", {"pattern": "mine", "path": "."})).text
        assert found == "file-link:1: mine"
    finally:
        session.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.txt"]
    assert secret.read_text() == "TOP-SECRET-VALUE"


@pytest.mark.parametrize(
    "command",
    ["cat /etc/passwd", "while :; do :; done", "python3 -c 'import socket; socket.socket()'",
     "yes", "python3 -c 'open(\"/etc/passwd\")'"],
)  # fmt: skip
def test_escape_attempts_through_run_are_error_observations(command):
    session = env.session(env.tasks("test", 1)[0])
    try:
        session.reset()
        assert session.step(ToolCall("run", {"command": command})).error
        listing = session.step(ToolCall("list_files", {"path": "."}))
        assert listing.error is None and "logs/" in listing.text
    finally:
        session.close()


def test_a_fork_bomb_through_run_leaves_the_session_going():
    session = env.session(env.tasks("test", 1)[0])
    try:
        session.reset()
        session.step(ToolCall("run", {"command": "bomb() { bomb | bomb & }; bomb; sleep 1"}))
        assert session.step(ToolCall("run", {"command": "echo alive"})).text == "alive"
    finally:
        session.close()


def test_run_has_an_aggregate_memory_cap(monkeypatch):
    # A smaller cap than the real one and hogs that outlive a long deadline: on a VM whose
    # untouched memory faults in slowly, four 250 MB hogs against the real 768 MB cap and 5 s
    # deadline can time out first. Here only the cap can end the run early.
    capped = replace(workspace.RUN_LIMITS, total_memory_mb=100, timeout_s=120.0)
    monkeypatch.setattr(workspace, "RUN_LIMITS", capped)
    hog = "python3 -c 'import time; b = b\"x\" * (40 << 20); time.sleep(120)'"
    hogs = f"for i in 1 2 3 4; do {hog} & done; wait"
    session = env.session(env.tasks("test", 1)[0])
    try:
        session.reset()
        observation = session.step(ToolCall("run", {"command": hogs}))
        assert observation.error and "memory limit" in observation.error
        assert session.step(ToolCall("run", {"command": "echo alive"})).text == "alive"
    finally:
        session.close()


def test_tools_work_on_the_workspace():
    task = env.tasks("test", 1)[0]
    session = env.session(task)
    try:
        session.reset()
        log = sorted(generate(**task.params["world"]).paths("logs/"))[0]
        assert session.step(ToolCall("search", {"pattern": "ERROR|INFO", "path": "logs"})).text
        assert session.step(ToolCall("move_file", {"source": log, "destination": "old/"})).text == (
            f"moved {log} to old/{log.split('/')[-1]}"
        )
        assert session.step(ToolCall("run", {"command": "ls old"})).text == log.split("/")[-1]
        assert session.step(ToolCall("delete_file", {"path": "old"})).error
    finally:
        session.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_oracle_passes_and_damage_fails(family):
    task = _task(family)
    calls = env.oracle(task)
    assert replay(env, task, calls).passed
    spare = next(p for p in generate(**task.params["world"]).files if p.startswith("config/"))
    if spare not in task.params["expect"]:
        damaged = [ToolCall("delete_file", {"path": spare}), *calls]
        assert not replay(env, task, damaged).passed


@pytest.mark.parametrize("family", ["find", "count", "extract"])
def test_questions_need_the_file_and_the_answer(family):
    task = _task(family)
    writes = env.oracle(task)[:-1]
    assert not replay(env, task, [*writes, ToolCall("finish", {"answer": FORGED_CLAIM})]).passed
    answer = env.oracle(task)[-1]
    assert not replay(env, task, [answer]).passed


def _with_answer(task, answer):
    return replay(env, task, [*env.oracle(task)[:-1], ToolCall("finish", {"answer": answer})])


def _wrong_like(fact):
    """A different value of the same kind as ``fact``."""
    if fact in PEOPLE:
        return next(p for p in PEOPLE if p != fact)
    service = next((s for s in SERVICES if s in fact), None)
    if service is not None and not re.search(r"\d", fact):
        return fact.replace(service, next(s for s in SERVICES if s != service))
    return re.sub(r"(\d+)(?!.*\d)", lambda m: str(int(m[1]) + 1).zfill(len(m[1])), fact)


@pytest.mark.parametrize("family", ["find", "count", "extract"])
def test_an_answer_listing_candidates_fails(family):
    for index in range(4):
        task = _task(family, index)
        right = env.oracle(task)[-1].arguments["answer"]
        assert _with_answer(task, f"The answer is {right}.").passed
        wrong = _wrong_like(task.params["answer"][0])
        hedged = _with_answer(task, f"{wrong}, {right}")
        assert not hedged.passed and "also names" in hedged.verdict.feedback, (task.id, wrong)


def test_a_huge_answer_fails():
    task = _task("count")
    right = env.oracle(task)[-1].arguments["answer"]
    assert not _with_answer(task, right + " " + "x" * 1_000_000).passed


def test_describe_relabels_oracle_trajectories():
    for family in ("lookup", "transform", "reorganise"):
        task = _task(family)
        spec = describe_task(env, replay(env, task, env.oracle(task)))
        assert spec is not None
        described = make_task("files", spec, difficulty=task.difficulty)
        assert replay(env, described, env.oracle(task)).passed


def test_describe_relabels_random_explorations():
    rng = random.Random(3)
    named = 0
    for task in env.tasks("train", 8):
        paths = sorted(generate(**task.params["world"]).files)
        calls = []
        for _ in range(3):
            path = rng.choice(paths)
            calls.append(rng.choice([
                ToolCall("move_file", {"source": path, "destination": f"moved/{path}"}),
                ToolCall("delete_file", {"path": path}),
                ToolCall("write_file", {"path": f"out/{rng.randint(1, 9)}.txt", "content": "hi"}),
                ToolCall("read_file", {"path": path}),
            ]))  # fmt: skip
        trajectory = replay(env, task, [*calls, ToolCall("finish", {"answer": "done"})])
        described = describe_task(env, trajectory)
        if described is not None:
            named += 1
            assert replay(env, described, [s.call for s in trajectory.steps]).passed
    assert named >= 6


def test_describe_names_nothing_for_a_read_only_trajectory():
    task = env.tasks("train", 1)[0]
    trajectory = replay(env, task, [ToolCall("list_files", {}), ToolCall("finish", {"answer": ""})])
    assert describe_task(env, trajectory) is None


def test_conformance_on_a_few_tasks():
    report = check_env(env, n=10, split_draws=100)
    assert report.passed, report.results


@pytest.mark.slow
def test_conformance_on_200_tasks():
    report = check_env(env, n=200)
    assert report.passed, report.results


def test_each_level_needs_one_more_action():
    for level in range(1, 6):
        for task in env.tasks("train", 30, difficulty=level):
            plan = env.oracle(task)
            assert len(plan) - 1 == level, task.instruction
            assert replay(env, task, plan).passed


def test_a_lookup_answer_must_be_exactly_the_value():
    task = next(t for t in env.tasks("test", 40, difficulty=1) if t.family == "lookup")
    (read, done) = env.oracle(task)
    value = task.params["answer"][0]
    assert read.name == "read_value" and done.arguments == {"answer": value}
    for answer, passed in [
        (value, True),
        (f" '{value}'. ", True),
        (f"The value is {value}", False),
        (f"{value}, 1, 2, 3", False),
        ("", False),
    ]:
        assert replay(env, task, [read, ToolCall("finish", {"answer": answer})]).passed is passed
    whole_file = replay(env, task, [ToolCall("read_file", {"path": read.arguments["path"]})])
    dump = whole_file.steps[0].observation.text
    assert not replay(env, task, [ToolCall("finish", {"answer": dump})]).passed


def test_path_arguments_accept_only_the_workspace_files():
    task = env.tasks("test", 1, difficulty=1)[0]
    files = sorted(generate(**task.params["world"]).files)
    session = env.session(task)
    try:
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in session.reset().tools}
        for name, argument in [("read_file", "path"), ("delete_file", "path")]:
            assert tools[name]["properties"][argument]["enum"] == files
        assert tools["move_file"]["properties"]["source"]["enum"] == files
        assert "enum" not in tools["write_file"]["properties"]["path"]
        configs = tools["read_value"]["properties"]["path"]["enum"]
        assert configs and all(p.startswith("config/") for p in configs)
        assert "port" in tools["read_value"]["properties"]["key"]["enum"]
        invented = session.step(ToolCall("read_file", {"path": "logs/all.log"}))
        assert invented.error and invented.error.startswith("bad arguments for read_file")
    finally:
        session.close()


def prefix_views(trajectory):
    """The episode cut after each successful action, finished with what that action showed."""
    views = []
    for end, step in enumerate(trajectory.steps, 1):
        if step.call is None or step.failed or step.call.name == "finish":
            continue
        calls = [s.call for s in trajectory.steps[:end]]
        views.append([*calls, ToolCall("finish", {"answer": step.observation.text})])
    return views


def test_a_failed_episode_is_relabelled_to_the_values_and_changes_its_prefixes_reached():
    task = next(t for t in env.tasks("train", 40, difficulty=4) if t.family == "extract")
    reads = env.oracle(task)[:3]
    tmp = next(p for p in generate(**task.params["world"]).files if p.endswith(".tmp"))
    calls = [reads[0], ToolCall("read_value", {"path": "config/none.ini", "key": "port"}), reads[1]]
    calls += [ToolCall("delete_file", {"path": tmp})]
    failed = replay(env, task, calls)
    assert not failed.passed and failed.steps[1].failed
    views = prefix_views(failed)
    described = [describe_task(env, replay(env, task, view)) for view in views]
    assert [d.family if d else None for d in described] == ["lookup", "lookup", "reorganise"]
    first, second = (reads[i].arguments for i in (0, 1))
    assert described[0].instruction.startswith(f"What is the value of '{first['key']}' in")
    assert described[1].params["reads"] == [{"name": "read_value", "arguments": second}]
    assert described[2].instruction == f"In the workspace: delete {tmp}. Call finish when done."
    assert [d.difficulty for d in described] == [1, 1, 1]
    for found, view in zip(described, views, strict=True):
        assert replay(env, found, view).passed


def test_values_the_episode_never_read_are_not_relabelled():
    task = next(t for t in env.tasks("train", 40, difficulty=1) if t.family == "lookup")
    value = task.params["answer"][0]
    log = next(p for p in generate(**task.params["world"]).files if p.startswith("logs/"))
    guessed = [ToolCall("read_file", {"path": log}), ToolCall("finish", {"answer": value})]
    assert describe_task(env, replay(env, task, guessed)) is None
    nothing = [ToolCall("read_file", {"path": log}), ToolCall("finish", {"answer": "hello"})]
    assert describe_task(env, replay(env, task, nothing)) is None
