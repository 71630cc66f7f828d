import json
import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

from typer.testing import CliRunner  # noqa: E402

from ratchet.cli import app  # noqa: E402
from ratchet.core.agent import Agent  # noqa: E402
from ratchet.engine.cluster import RayConfig, RayPool  # noqa: E402
from ratchet.engine.request import RolloutRequest  # noqa: E402
from ratchet.engine.store import Store  # noqa: E402
from ratchet.envs.registry import load_env_reference  # noqa: E402

pytestmark = pytest.mark.slow

DYING_ENV = """
import os
import time
from pathlib import Path

from ratchet.envs.calc import env as calc

MARKER = Path({marker!r})


class Session:
    def __init__(self, inner):
        self.inner = inner

    def reset(self):
        return self.inner.reset()

    def step(self, call):
        if not MARKER.exists():
            MARKER.write_text(str(os.getpid()))
            os._exit(1)  # the worker's process dies in the middle of an episode
        time.sleep(0.05)
        return self.inner.step(call)

    def verify(self):
        return self.inner.verify()

    def close(self):
        self.inner.close()


class Dying:
    def __getattr__(self, name):
        return getattr(calc, name)

    def session(self, task):
        return Session(calc.session(task))


env = Dying()
"""


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_killed_worker_loses_no_episode_and_none_is_recorded_twice(tmp_path, cluster):
    (tmp_path / "dying.py").write_text(DYING_ENV.format(marker=str(tmp_path / "killed")))
    reference = f"{tmp_path / 'dying.py'}:env"
    env = load_env_reference(reference)
    tasks = env.tasks("test", 6, seed=0)
    handed = []
    with Store(tmp_path / "store") as store, RayPool(reference, {}, RayConfig(2, 2)) as pool:
        run = store.start_run("eval", {})

        def record(trajectory):
            handed.append(trajectory)
            store.add_trajectory(run, trajectory)

        oracle = Agent(version="oracle")
        played = pool.rollout(RolloutRequest(env, tasks, oracle, k=2, on_trajectory=record))
        stored = store.trajectories(run)
        assert pool.deaths == 1 and len(pool.workers) == 2
    assert (tmp_path / "killed").exists()
    expected = [(t.id, s) for t in tasks for s in (0, 1)]
    assert [(t.task.id, t.sample) for t in handed] == expected  # each once, in task order
    assert [(t.task.id, t.sample) for t in played] == expected
    assert len(stored) == len(expected) and all(t.passed for _, t in stored)


def test_model_driven_episodes_build_their_backend_in_the_workers_and_resume(tmp_path, cluster):
    env = load_env_reference("calc")
    tasks = env.tasks("train", 4, seed=1)
    with RayPool("calc", {}, RayConfig(2, 3)) as pool:
        request = RolloutRequest(env, tasks, Agent(model="fake"), skip={(tasks[0].id, 0)})
        played = pool.rollout(request)
    assert [t.task.id for t in played] == [t.id for t in tasks[1:]]
    assert all(t.model == "fake" and t.steps and not t.passed for t in played)


def test_eval_and_run_take_ray(tmp_path, cluster):
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            *[
                "eval",
                "calc",
                "--agent",
                "oracle",
                "-n",
                "4",
                "--ray",
                "local",
                "--json",
                "--quiet",
                "--out",
            ],
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[0])["pass@1"] == 1.0
    result = runner.invoke(
        app,
        [
            *[
                "run",
                "calc",
                "--agent",
                "null",
                "-n",
                "3",
                "--ray",
                "local",
                "--ray-workers",
                "1",
                "-q",
                "--out",
            ],
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 0, result.output
    with Store(tmp_path / "run") as store:
        assert store.count_trajectories() == 3


def test_ray_local_starts_its_own_instance_even_with_ray_address_set(tmp_path):
    # Nothing listens at RAY_ADDRESS: joining it would fail, so passing means a private instance.
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:9"}
    command = [sys.executable, "-c", "from ratchet.cli import app; app()"]
    command += ["eval", "calc", "--agent", "oracle", "-n", "2"]
    command += ["--ray", "local", "--ray-workers", "1", "--json", "-q", "--out", str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0])["pass@1"] == 1.0
