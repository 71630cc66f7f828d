import json
import subprocess
import sys
from dataclasses import replace

import pytest

from ratchet.core.agent import Agent
from ratchet.core.serialise import to_dict
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory
from ratchet.engine.export import (
    MESSAGE_KEYS,
    chat_record,
    from_chat_record,
    from_dataset,
    loss_mask,
    read_jsonl,
    to_dataset,
    write_jsonl,
)
from ratchet.engine.harness import replay
from ratchet.envs.calc import env


@pytest.fixture(scope="module")
def trajectories() -> list[Trajectory]:
    tasks = env.tasks("train", 3, seed=2)
    solved = [replay(env, task, env.oracle(task), Agent(version="oracle")) for task in tasks]
    failed = replay(env, tasks[0], [ToolCall("divide", {"a": 1, "b": 0})], Agent(version="null"))
    crashed = replace(
        solved[1],
        verdict=None,
        error="RuntimeError: the world broke",
        sample=3,
        model="fake",
        metadata={"note": "ünïcode"},
        messages=({"role": "system", "content": "Be brief."}, *solved[1].messages),
    )
    return [*solved, failed, crashed]


def test_loss_mask_marks_assistant_messages():
    roles = ["system", "user", "assistant", "tool", "assistant"]
    assert loss_mask([{"role": r} for r in roles]) == [0, 0, 1, 0, 1]


def test_chat_record_is_a_chat_example_with_metadata(trajectories):
    trajectory = trajectories[0]
    record = chat_record(trajectory)
    assert record["messages"] == list(trajectory.messages)
    assert record["tools"] == list(trajectory.tools)
    assert record["task_id"] == trajectory.task.id and record["env"] == "calc"
    assert record["passed"] is True and record["score"] == 1.0
    assert record["ratchet"] == to_dict(trajectory)
    assert "ratchet" not in chat_record(trajectory, include_record=False)
    assert from_chat_record(json.loads(json.dumps(record))) == trajectory


def test_jsonl_round_trip(trajectories, tmp_path):
    path = tmp_path / "out.jsonl"
    assert write_jsonl(iter(trajectories), path) == len(trajectories)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(trajectories)
    first = json.loads(lines[0])
    assert [m["role"] for m in first["messages"][:3]] == ["system", "user", "assistant"]
    assert first["messages"][2]["content"] is None
    assert isinstance(first["messages"][2]["tool_calls"][0]["function"]["arguments"], str)
    assert read_jsonl(path) == trajectories


def test_jsonl_without_record_cannot_be_imported(trajectories, tmp_path):
    path = tmp_path / "slim.jsonl"
    write_jsonl(trajectories, path, include_record=False)
    assert "ratchet" not in json.loads(path.read_text().splitlines()[0])
    with pytest.raises(ValueError, match=r"slim.jsonl:1: .*include_record=True"):
        read_jsonl(path)


def test_read_jsonl_names_the_bad_line(trajectories, tmp_path):
    path = tmp_path / "bad.jsonl"
    write_jsonl(trajectories[:1], path)
    with path.open("a") as out:
        out.write("\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:3: "):
        read_jsonl(path)
    broken = chat_record(trajectories[0])
    del broken["ratchet"]["task"]
    path.write_text(json.dumps(broken) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: .*malformed"):
        read_jsonl(path)


def test_read_jsonl_skips_blank_lines(trajectories, tmp_path):
    path = tmp_path / "gaps.jsonl"
    write_jsonl(trajectories[:2], path)
    path.write_text("\n" + path.read_text().replace("\n", "\n\n"))
    assert read_jsonl(path) == trajectories[:2]


def test_dataset_rows_have_messages_tools_and_loss_masks(trajectories):
    dataset = to_dataset(trajectories)
    assert len(dataset) == len(trajectories)
    for row, trajectory in zip(dataset, trajectories, strict=True):
        assert row["loss_mask"] == loss_mask(trajectory.messages)
        assert row["tools"] == list(trajectory.tools)
        assert all(set(m) == set(MESSAGE_KEYS) for m in row["messages"])
        present = [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]
        original = [{k: v for k, v in m.items() if v is not None} for m in trajectory.messages]
        assert present == original
        assert (row["task_id"], row["sample"]) == (trajectory.task.id, trajectory.sample)
        assert (row["passed"], row["score"]) == (trajectory.passed, trajectory.score)
    assert dataset[0]["messages"][2]["content"] is None


def test_dataset_round_trip(trajectories, tmp_path):
    assert from_dataset(to_dataset(trajectories)) == trajectories
    # The schema survives Parquet, the format other trainers read.
    from datasets import Dataset

    path = tmp_path / "trajectories.parquet"
    to_dataset(trajectories).to_parquet(str(path))
    assert from_dataset(Dataset.from_parquet(str(path))) == trajectories


def test_empty_dataset_and_dataset_without_record(trajectories):
    assert from_dataset(to_dataset([])) == []
    slim = to_dataset(trajectories, include_record=False)
    assert "ratchet" not in slim.column_names
    with pytest.raises(ValueError, match="include_record=True"):
        from_dataset(slim)


def test_dataset_encodes_dict_arguments_as_json(trajectories):
    call = {"id": "c", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    trajectory = replace(trajectories[0], messages=(message,))
    row = to_dataset([trajectory])[0]
    assert json.loads(row["messages"][0]["tool_calls"][0]["function"]["arguments"]) == {"a": 1}


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"content": "no role"}, "string 'role'"),
        ({"role": "user", "content": [{"type": "text", "text": "hi"}]}, "text or null"),
        ({"role": "assistant", "tool_calls": [{"id": "x"}]}, "function with a name"),
    ],
)
def test_dataset_rejects_messages_it_cannot_store(trajectories, message, problem):
    with pytest.raises(ValueError, match=problem):
        to_dataset([replace(trajectories[0], messages=(message,))])


def test_datasets_is_imported_lazily():
    code = "import sys, ratchet.engine.export; assert 'datasets' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_turns_a_client_wrote_are_never_marked_for_training(trajectories):
    solved = trajectories[0]
    steps = (replace(solved.steps[0], given=True), *solved.steps[1:])
    served = replace(solved, steps=steps)
    record = chat_record(served)
    assistant = [m for m in record["messages"] if m["role"] == "assistant"]
    assert assistant[0]["weight"] == 0 and all("weight" not in m for m in assistant[1:])
    assert from_chat_record(json.loads(json.dumps(record))) == served
    roles = [m["role"] for m in served.messages]
    first = roles.index("assistant")
    mask = loss_mask(served.messages, [not s.given for s in served.steps])
    assert mask[first] == 0 and sum(mask) == roles.count("assistant") - 1
