import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import replay
from ratchet.engine.store import SCHEMA_VERSION, Store, StoreError
from ratchet.envs.calc import env


def untimed(trajectory: Trajectory) -> Trajectory:
    """The trajectory with wall-clock fields zeroed, so replays compare equal."""
    steps = tuple(replace(step, latency_s=0.0) for step in trajectory.steps)
    return replace(trajectory, seconds=0.0, steps=steps)


def oracle(task, sample=0):
    return replace(replay(env, task, env.oracle(task), Agent(version="oracle")), sample=sample)


def null(task, sample=0):
    calls = [ToolCall("finish", {"answer": "no idea"})]
    return replace(replay(env, task, calls, Agent(version="null")), sample=sample)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as opened:
        yield opened


@pytest.fixture(scope="module")
def tasks():
    return env.tasks("train", 3, seed=0) + env.tasks("test", 2, seed=0)


def schema_version(root):
    with closing(sqlite3.connect(root / "ratchet.db")) as db:
        return db.execute("PRAGMA user_version").fetchone()[0]


def test_creates_directory_and_database(tmp_path):
    root = tmp_path / "a" / "store"
    with Store(root):
        assert (root / "ratchet.db").is_file()
    assert schema_version(root) == SCHEMA_VERSION
    with closing(sqlite3.connect(root / "ratchet.db")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_keeps_data(tmp_path, tasks):
    with Store(tmp_path) as store:
        run_id = store.start_run("eval", {"n": 1})
        trajectory_id = store.add_trajectory(run_id, oracle(tasks[0]))
    with Store(tmp_path) as store:
        assert store.trajectory(trajectory_id).task == tasks[0]
        assert store.run(run_id).config == {"n": 1}


def test_newer_schema_is_refused_with_a_clear_error(tmp_path):
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "ratchet.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    with pytest.raises(StoreError, match="Upgrade ratchet"):
        Store(tmp_path)
    db = sqlite3.connect(tmp_path / "ratchet.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # left as it was
    db.close()


def test_empty_database_file_is_migrated(tmp_path):
    sqlite3.connect(tmp_path / "ratchet.db").close()
    with Store(tmp_path) as store:
        assert store.runs() == []
    assert schema_version(tmp_path) == SCHEMA_VERSION


def test_a_store_opened_only_if_it_exists_leaves_an_empty_or_missing_file_alone(tmp_path):
    with pytest.raises(StoreError, match="holds no ratchet store"):
        Store(tmp_path / "none", create=False)
    assert not (tmp_path / "none").exists()
    (tmp_path / "ratchet.db").touch()
    with pytest.raises(StoreError, match="holds no ratchet store"):
        Store(tmp_path, create=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ratchet.db"]
    assert (tmp_path / "ratchet.db").stat().st_size == 0
    with Store(tmp_path) as store:
        store.start_run("eval", {})
    with Store(tmp_path, create=False) as store:
        assert len(store.runs()) == 1


def test_foreign_sqlite_database_is_refused_untouched(tmp_path):
    db = sqlite3.connect(tmp_path / "ratchet.db")
    db.execute("CREATE TABLE notes (text TEXT)")
    db.close()
    with pytest.raises(StoreError, match="not a ratchet store"):
        Store(tmp_path)
    db = sqlite3.connect(tmp_path / "ratchet.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()
    assert not (tmp_path / "ratchet.db-wal").exists()


def test_non_database_file_is_refused(tmp_path):
    (tmp_path / "ratchet.db").write_text("these are not the bytes of an SQLite file" * 10)
    with pytest.raises(StoreError, match="not a usable ratchet store"):
        Store(tmp_path)


def test_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        Store(tmp_path / "file")


def test_closed_store_says_so(tmp_path):
    store = Store(tmp_path)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.runs()


def test_runs_lifecycle(store):
    first = store.start_run("eval", {"env": "calc", "n": 5})
    second = store.start_run("improve", {}, run_id="my-run")
    assert second == "my-run" and first.startswith("eval-")
    assert store.run(first).status == "running"
    store.finish_run(first, "interrupted")
    assert store.run(first).status == "interrupted"
    store.finish_run(first)
    assert [(r.id, r.status) for r in store.runs()] == [(first, "done"), (second, "running")]
    assert [r.id for r in store.runs(kind="improve")] == ["my-run"]
    assert store.run(first).config == {"env": "calc", "n": 5}


def test_run_errors(store):
    store.start_run("eval", {}, run_id="r")
    with pytest.raises(StoreError, match="already exists"):
        store.start_run("eval", {}, run_id="r")
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.finish_run("nope")
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.run("nope")
    with pytest.raises(ValueError, match="run status must be one of"):
        store.finish_run("r", "finished")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.start_run("eval", {"bad": object()})


def test_trajectory_round_trip_and_idempotent_add(store, tasks):
    run_id = store.start_run("eval", {})
    trajectory = oracle(tasks[0])
    trajectory_id = store.add_trajectory(run_id, trajectory)
    assert store.trajectory(trajectory_id) == trajectory
    assert store.add_trajectory(run_id, trajectory) == trajectory_id
    # First write wins: a different episode under the same key does not replace it.
    assert store.add_trajectory(run_id, replace(trajectory, error="later")) == trajectory_id
    assert store.trajectory(trajectory_id).error is None
    assert len(store.trajectories()) == 1
    other_run = store.start_run("eval", {})
    assert store.add_trajectory(other_run, trajectory) != trajectory_id


def test_add_trajectories_is_one_transaction(store, tasks):
    run_id = store.start_run("eval", {})
    batch = [oracle(task) for task in tasks]
    ids = store.add_trajectories(run_id, batch)
    assert len(set(ids)) == len(batch)
    assert [t for _, t in store.trajectories(run_id=run_id)] == batch
    assert store.add_trajectories(run_id, [batch[1], oracle(tasks[0], sample=1)])[0] == ids[1]
    with pytest.raises(StoreError, match="start_run it first"):
        store.add_trajectories("missing", batch)
    assert len(store.trajectories()) == len(batch) + 1


def test_unknown_trajectory(store):
    with pytest.raises(StoreError, match="no trajectory 7"):
        store.trajectory(7)


def test_trajectory_filters(store, tasks):
    run_a = store.start_run("eval", {})
    run_b = store.start_run("eval", {})
    ids_a = store.add_trajectories(run_a, [oracle(t) for t in tasks])
    ids_b = store.add_trajectories(run_b, [null(t) for t in tasks[:2]])

    def ids(**filters):
        return [i for i, _ in store.trajectories(**filters)]

    assert ids() == ids_a + ids_b
    assert ids(run_id=run_b) == ids_b
    assert ids(agent="oracle") == ids_a
    assert ids(passed=True) == ids_a and ids(passed=False) == ids_b
    assert ids(split="test") == ids_a[3:]
    assert ids(env="calc") == ids_a + ids_b and ids(env="shop") == []
    assert ids(task_ids={tasks[1].id}) == [ids_a[1], ids_b[1]]
    assert ids(task_ids=[]) == []
    assert ids(limit=2) == ids_a[:2]
    assert ids(run_id=run_a, split="train", passed=True, limit=1) == ids_a[:1]
    assert all(t.passed for _, t in store.trajectories(agent="oracle"))


def test_done_keys(store, tasks):
    run_id = store.start_run("eval", {})
    store.add_trajectories(run_id, [oracle(tasks[0], 0), oracle(tasks[0], 1), null(tasks[1])])
    assert store.done_keys(run_id, "oracle") == {(tasks[0].id, 0), (tasks[0].id, 1)}
    assert store.done_keys(run_id, "null") == {(tasks[1].id, 0)}
    assert store.done_keys(run_id, "base") == set()


def test_agent_versions_and_lineage(store, tmp_path):
    root = store.add_agent_version("v0", parent=None, lever="base", path=store.root / "agents/v0")
    store.add_agent_version("v1", parent="v0", lever="memory", path=store.root / "agents/v1")
    outside = tmp_path / "elsewhere"
    v2 = store.add_agent_version(
        "v2", parent="v1", lever="lora", path=outside, metadata={"learned_from": [1, 2]}
    )
    store.add_agent_version("w1", parent="v0", lever="prompt", path="rel/w1")
    assert root.path == store.root / "agents" / "v0"
    assert v2.path == outside.resolve() and v2.metadata == {"learned_from": [1, 2]}
    assert [v.id for v in store.lineage("v2")] == ["v0", "v1", "v2"]
    assert [v.id for v in store.lineage("v0")] == ["v0"]
    assert [v.id for v in store.agent_versions()] == ["v0", "v1", "v2", "w1"]
    assert store.agent_version("v2") == v2
    assert store.agent_version("w1").path == Path("rel/w1").resolve()  # relative to the cwd
    with closing(sqlite3.connect(store.db_path)) as db:
        stored = dict(db.execute("SELECT id, path FROM agent_versions").fetchall())
    assert stored["v1"] == str(Path("agents") / "v1")  # relative: the store can move


def test_agent_version_errors(store):
    store.add_agent_version("v0", parent=None, lever="base", path="a")
    with pytest.raises(StoreError, match="already exists"):
        store.add_agent_version("v0", parent=None, lever="base", path="a")
    with pytest.raises(StoreError, match="parent agent version 'vX'"):
        store.add_agent_version("v1", parent="vX", lever="memory", path="a")
    with pytest.raises(StoreError, match="its own parent"):
        store.add_agent_version("v1", parent="v1", lever="memory", path="a")
    with pytest.raises(StoreError, match="no agent version 'v9'"):
        store.lineage("v9")


def test_decisions(store):
    run_id = store.start_run("improve", {})
    other = store.start_run("improve", {})
    rejected = store.add_decision(
        run_id,
        round=1,
        lever="memory",
        candidate="c1",
        incumbent="v0",
        accepted=False,
        numbers={"delta": -0.02, "p": 0.7},
    )
    accepted = store.add_decision(
        run_id,
        round=2,
        lever="skills",
        candidate="v1",
        incumbent="v0",
        accepted=True,
        numbers={"delta": 0.1, "p": 0.01},
    )
    store.add_decision(
        other, round=1, lever="prompt", candidate="c", incumbent="v0", accepted=False, numbers={}
    )
    assert store.decisions(run_id) == [rejected, accepted]
    assert len(store.decisions()) == 3
    assert accepted.accepted and accepted.numbers == {"delta": 0.1, "p": 0.01}
    with pytest.raises(StoreError, match="no run"):
        store.add_decision(
            "nope", round=1, lever="m", candidate="c", incumbent="v", accepted=True, numbers={}
        )


def test_threads_share_one_store_while_others_read(store, tasks):
    run_id = store.start_run("eval", {})
    base = oracle(tasks[0])
    errors: list[BaseException] = []
    writing = threading.Event()

    def write(offset: int) -> None:
        try:
            for sample in range(offset, offset + 25):
                store.add_trajectory(run_id, replace(base, sample=sample))
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        try:
            with Store(store.root) as reader:  # a second connection, as another process has
                while writing.is_set():
                    for _, trajectory in reader.trajectories(run_id=run_id):
                        assert trajectory.task == base.task
                    store.done_keys(run_id, "oracle")
        except BaseException as exc:
            errors.append(exc)

    writing.set()
    readers = [threading.Thread(target=read) for _ in range(2)]
    writers = [threading.Thread(target=write, args=(i * 25,)) for i in range(4)]
    for thread in readers + writers:
        thread.start()
    for thread in writers:
        thread.join()
    writing.clear()
    for thread in readers:
        thread.join()
    assert errors == []
    assert {sample for _, sample in store.done_keys(run_id, "oracle")} == set(range(100))


WRITER = """
import sys
from dataclasses import replace
from ratchet.core.agent import Agent
from ratchet.envs.calc import env
from ratchet.engine.store import Store
from ratchet.engine.harness import replay


def untimed(trajectory):
    steps = tuple(replace(step, latency_s=0.0) for step in trajectory.steps)
    return replace(trajectory, seconds=0.0, steps=steps)


tasks = env.tasks("train", 3, seed=0)
bases = [untimed(replay(env, task, env.oracle(task), Agent(version="oracle"))) for task in tasks]
store = Store(sys.argv[1])
sample = 0
while True:  # until killed
    for base in bases:
        store.add_trajectory(sys.argv[2], replace(base, sample=sample))
    sample += 1
"""


def test_kill_and_resume_loses_no_finished_trajectory(tmp_path):
    tasks = env.tasks("train", 3, seed=0)
    expected = {task.id: untimed(oracle(task)) for task in tasks}
    with Store(tmp_path) as store:
        run_id = store.start_run("run", {"env": "calc"})
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), run_id])
    try:
        with Store(tmp_path) as watcher:  # reads from another process while the child writes
            deadline = time.monotonic() + 60
            while len(watcher.done_keys(run_id, "oracle")) < 60:
                assert child.poll() is None, "the writer died on its own"
                assert time.monotonic() < deadline, "the writer made no progress"
                time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL

    with closing(sqlite3.connect(tmp_path / "ratchet.db")) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with Store(tmp_path) as store:
        stored = store.trajectories(run_id=run_id)
        assert len(stored) >= 60
        for _, trajectory in stored:
            assert trajectory == replace(expected[trajectory.task.id], sample=trajectory.sample)
        done = store.done_keys(run_id, "oracle")
        assert len(done) == len(stored)

        # Resume: play only what is not done, up to a plan larger than what was written.
        planned = {(task.id, sample) for task in tasks for sample in range(len(stored) // 3 + 5)}
        by_id = {task.id: task for task in tasks}
        todo = sorted(planned - done)
        assert todo
        for task_id, sample in todo:
            store.add_trajectory(run_id, replace(untimed(oracle(by_id[task_id])), sample=sample))
        assert store.done_keys(run_id, "oracle") == planned | done
        assert len(store.trajectories(run_id=run_id)) == len(planned | done)


def test_put_trajectory_replaces_the_stored_record_and_keeps_its_id(store, tasks):
    run = store.start_run("serve", {})
    first = store.put_trajectory(run, null(tasks[0]))
    assert not store.trajectory(first).passed
    passed = replace(null(tasks[0]), verdict=oracle(tasks[0]).verdict)
    assert store.put_trajectory(run, passed) == first
    assert store.trajectory(first).passed and store.count_trajectories(run) == 1
    assert [t.passed for _, t in store.trajectories(run, passed=True)] == [True]
    with pytest.raises(StoreError, match="no run"):
        store.put_trajectory("missing", passed)
