import json

import pytest

from ratchet.core.env import FINISH
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.engine.models.fake import FakeModel
from ratchet.forge import ForgeConfig, ForgeRefused, forge_spec, load_forged
from ratchet.forge.author import module_code
from ratchet.forge.written import ModuleError, Worker
from ratchet.sandbox import landlock_abi

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")

CONFIG = ForgeConfig(max_difficulty=2, tasks_per_level=150, check_tasks=12, split_draws=60)

NOTES = """
import random

NAME = "forge/notes"
DESCRIPTION = "Keep notes under keys."
MAX_DIFFICULTY = 2
KEYS = ["k%d" % i for i in range(20)]
VALUES = ["v%d" % i for i in range(20)]
TOOLS = [
    {
        "name": "put",
        "description": "Store a note under a key.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}, "value": {"type": "string"}},
            "required": ["key", "value"],
        },
    }
]


def sample(rng, difficulty):
    goal = {key: rng.choice(VALUES) for key in rng.sample(KEYS, difficulty)}
    wants = ", ".join(f"{k} to {v}" for k, v in goal.items())
    return {"instruction": f"Set {wants}, then call finish.", "params": {"goal": goal}}


def build(params):
    return {}


def call(world, name, arguments):
    if name != "put":
        raise ValueError("no tool " + name)
    world[arguments["key"]] = arguments["value"]
    return "ok"


def verify(params, world, answer):
    return VERDICT


def oracle(params):
    puts = [{"name": "put", "arguments": {"key": k, "value": v}} for k, v in params["goal"].items()]
    return puts + [{"name": "finish", "arguments": {"answer": "done"}}]
"""
GOOD = NOTES.replace("VERDICT", 'world == params["goal"], f"notes are {world}"')
LENIENT = NOTES.replace("VERDICT", 'True, "looks fine"')


def reply(code: str) -> str:
    return f"Here is the module.\n\n```python\n{code}```\n"


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("A store of notes: the agent sets keys to values; verify the store.")
    return path


def test_a_good_module_passes_first_time_and_is_written(spec, tmp_path):
    model = FakeModel(script=[reply(GOOD)], name="openai:writer")
    out = tmp_path / "notes"
    forged = forge_spec(spec, model, out, CONFIG)
    assert forged.report.passed and model.calls == 1
    record = json.loads((out / "forge.json").read_text())
    assert record["repairs"] == 0 and record["model"] == "openai:writer"
    assert record["route"] == "spec" and record["spec"] == "spec.md"
    assert (out / "spec.md").read_text() == spec.read_text()
    assert (out / "module.py").read_text() == GOOD
    assert "passes all 16 checks" in (out / "check.txt").read_text()
    env = load_forged(out)
    assert env.name == "forge/notes" and env.version == record["version"]
    task = env.tasks("test", 3)[0]
    assert replay(env, task, env.oracle(task)).passed
    assert not replay(env, task, [ToolCall(FINISH, {"answer": "done"})]).passed


def test_a_failing_module_is_repaired_from_the_check_report(spec, tmp_path):
    model = FakeModel(script=[reply(LENIENT), reply(GOOD)])
    forged = forge_spec(spec, model, tmp_path / "notes", CONFIG)
    assert forged.record["repairs"] == 1 and model.calls == 2
    assert (tmp_path / "notes" / "module.py").read_text() == GOOD


def test_the_repair_prompt_carries_the_check_report(spec, tmp_path):
    seen = []

    def answer(prompt, rng):
        seen.append(prompt.messages)
        return reply(GOOD if len(seen) > 1 else LENIENT)

    forge_spec(spec, FakeModel(reply=answer), tmp_path / "notes", CONFIG)
    repair = seen[1][-1]["content"]
    assert seen[1][-2] == {"role": "assistant", "content": reply(LENIENT)}
    assert "FAIL  null scores below the oracle" in repair and "reply with the whole" in repair


def test_a_module_that_never_passes_is_refused_with_its_report(spec, tmp_path):
    broken = GOOD.replace("import random", "import random\nimport numpy")
    model = FakeModel(script=[reply(LENIENT), "I cannot write code.", reply(broken)])
    with pytest.raises(ForgeRefused) as refused:
        forge_spec(
            spec, model, tmp_path / "notes", ForgeConfig(**{**CONFIG.__dict__, "max_repairs": 2})
        )
    assert refused.value.attempts == 3 and model.calls == 3
    assert "failed to import" in refused.value.report and "numpy" in refused.value.report
    assert not (tmp_path / "notes").exists()


def test_the_module_code_is_the_longest_fenced_block():
    text = "```python\nx = 1\n```\nand\n```\nimport json\nNAME = 'a'\n```"
    assert module_code(text) == "import json\nNAME = 'a'\n"
    assert module_code("no code here") is None


def test_the_module_runs_in_the_sandbox_where_ratchet_is_out_of_reach(spec, tmp_path):
    nosy = GOOD.replace("import random", "import random\nimport ratchet")
    config = ForgeConfig(**{**CONFIG.__dict__, "max_repairs": 0})
    with pytest.raises(ForgeRefused) as refused:
        forge_spec(spec, FakeModel(script=[reply(nosy)]), tmp_path / "notes", config)
    assert "No module named 'ratchet'" in refused.value.report


def test_a_worker_that_dies_is_started_again():
    code = GOOD.replace('raise ValueError("no tool " + name)', "import os; os._exit(3)")
    worker = Worker(code)
    try:
        worker.ask("open", session="s", params={"goal": {}})
        assert worker.ask("call", session="s", name="put", arguments={"key": "a", "value": "b"})
        with pytest.raises(ModuleError, match="exited"):
            worker.ask("call", session="s", name="other", arguments={})
        assert worker.ask("info")["name"] == "forge/notes"
        with pytest.raises(ModuleError, match="no open session"):
            worker.ask("verify", session="s", answer=None)
    finally:
        worker.close()
