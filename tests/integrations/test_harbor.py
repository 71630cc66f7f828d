from pathlib import Path

import pytest

from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.envs.check import check_env
from ratchet.envs.registry import load_env_reference
from ratchet.integrations.harbor import harbor_env, read_task
from ratchet.sandbox import SandboxUnavailable, require_landlock

try:
    require_landlock()
except SandboxUnavailable as exc:  # pragma: no cover - depends on the kernel
    pytest.skip(f"no sandbox here: {exc}", allow_module_level=True)

TASKS = Path(__file__).parent / "harbor_tasks"
HELLO = TASKS / "hello-file"


@pytest.fixture(scope="module")
def hello():
    env = harbor_env(TASKS, name="hello", splits={"test": ["hello-file"]})
    return env, env.tasks("test", 1)[0]


def test_a_task_directory_is_read_with_its_metadata():
    task = read_task(HELLO)
    assert (task.name, task.difficulty, task.timeout("verifier", 1)) == ("hello-file", 2, 30.0)
    assert task.instruction.startswith("Read the name in /app/name.txt")


def test_the_agent_works_in_a_seeded_sandbox_and_sees_no_tests(hello):
    env, task = hello
    assert "the current folder" not in task.instruction and "./name.txt" in task.instruction
    calls = [ToolCall("bash", {"command": "ls -A; cat name.txt"}), ToolCall("finish", {})]
    listing = replay(env, task, calls).steps[0].observation.text
    assert listing.split() == ["name.txt", "Ada"]  # no Dockerfile, no tests, no solution


def test_the_oracle_passes_with_the_reward_json_metrics_and_doing_nothing_fails(hello):
    env, task = hello
    solved = replay(env, task, env.oracle(task))
    assert solved.passed and solved.verdict.metrics == {"reward": 1.0, "mentions": 1.0}
    idle = replay(env, task, [ToolCall("finish", {"answer": ""})])
    assert not idle.passed and idle.verdict.metrics["mentions"] == 0.0


def test_a_planted_reward_file_is_out_of_the_agent_s_reach(hello):
    env, task = hello
    plant = (
        "mkdir -p logs/verifier .verifier tests && echo 1 > logs/verifier/reward.txt && "
        "echo 1 > reward.txt && ln -s /logs .verifier/logs && echo 'echo 1' > tests/test.sh"
    )
    forged = replay(env, task, [ToolCall("bash", {"command": plant}), ToolCall("finish", {})])
    assert forged.steps[0].observation.error is None
    assert not forged.passed and forged.score == 0.0


@pytest.mark.slow  # about 10 s of sandboxed runs; the interop acceptance script runs it too
def test_the_example_env_passes_check():
    env = load_env_reference(f"{Path(__file__).parents[2] / 'examples' / 'harbor_env.py'}:env")
    report = check_env(env, n=3, split_draws=20)
    assert report.passed, [r for r in report.results if not r.passed]


def test_bad_task_folders_and_splits_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match=r"has no instruction\.md"):
        read_task(tmp_path)
    with pytest.raises(ValueError, match="splits name tasks that are not there: nope"):
        harbor_env(TASKS, name="x", splits={"test": ["nope"]})
    with pytest.raises(ValueError, match="not a folder"):
        harbor_env(tmp_path / "missing", name="x")


def test_a_failing_verifier_s_feedback_is_the_same_every_run(tmp_path):
    task_dir = tmp_path / "broken"
    (task_dir / "tests").mkdir(parents=True)
    (task_dir / "instruction.md").write_text("Do nothing.")
    (task_dir / "tests" / "test.sh").write_text("cat /tests/missing.txt\n")
    env = harbor_env(tmp_path, name="broken", splits={"test": ["broken"]})
    task = env.tasks("test", 1)[0]
    first, second = (replay(env, task, [ToolCall("finish", {})]).verdict for _ in range(2))
    assert first == second and "tests/missing.txt" in first.feedback
    assert ".verifier-" not in first.feedback
