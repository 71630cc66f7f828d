"""The forge examples: a SQLite library and an MCP help desk become envs that pass the check."""

from pathlib import Path

import pytest

from ratchet.core.env import FINISH
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.forge import ForgeConfig, forge_tools, load_forged

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_the_library_example_forges_an_env_that_passes_check(tmp_path):
    config = ForgeConfig(max_difficulty=2, tasks_per_level=80, check_tasks=10, split_draws=100)
    forged = forge_tools(f"{EXAMPLES / 'library_forge.py'}:source", tmp_path / "library", config)
    assert forged.report.passed, forged.report.text()
    record = forged.record
    assert set(record["writes"]) == {"lend_book", "return_book", "move_book"}
    assert set(record["reads"]) == {"book_status", "shelf_of", "borrower_of", "loans_of"}
    env = load_forged(tmp_path / "library")
    level_one = env.tasks("train", 30, seed=0, difficulty=1)
    lend = next(t for t in level_one if t.family == "lend_book")
    book, member = (lend.params["calls"][0]["arguments"][k] for k in ("book_id", "member_id"))
    assert lend.instruction == f"Lend book {book} to member {member}. Then call finish."
    wrong = "M01" if member != "M01" else "M02"
    mistaken = [ToolCall("lend_book", {"book_id": book, "member_id": wrong}),
                ToolCall(FINISH, {"answer": "done"})]  # fmt: skip
    failed = replay(env, lend, mistaken)
    assert not failed.passed and f"expected '{member}'" in failed.verdict.feedback
    relabelled = env.describe(failed)
    assert relabelled is not None
    assert relabelled.instruction == f"Lend book {book} to member {wrong}. Then call finish."


@pytest.mark.slow
def test_the_mcp_example_forges_an_env_that_passes_check(tmp_path):
    config = ForgeConfig(max_difficulty=2, tasks_per_level=40, check_tasks=10, split_draws=60)
    forged = forge_tools(f"{EXAMPLES / 'helpdesk_forge.py'}:source", tmp_path / "helpdesk", config)
    assert forged.report.passed, forged.report.text()
    assert "board" not in forged.record["reads"] + forged.record["writes"]
    assert any(name.endswith("helpdesk_mcp.py") for name in forged.record["pins"])
    env = load_forged(tmp_path / "helpdesk")
    task = env.tasks("test", 1, seed=0)[0]
    assert replay(env, task, env.oracle(task)).passed
