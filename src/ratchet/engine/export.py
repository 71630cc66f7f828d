"""Export trajectories for trainers (OpenAI-chat JSONL, Hugging Face ``datasets``) and back.

A JSONL line is a valid chat-format training example with metadata beside it and, unless
``include_record=False``, the full trajectory under ``"ratchet"`` so it can be imported back::

    {"messages": [...], "tools": [...], "task_id": "calc-...", "env": "calc", "split": "train",
     "agent": "oracle", "model": "", "sample": 0, "passed": true, "score": 1.0,
     "ratchet": {...the trajectory record...}}

A :func:`to_dataset` row has the same fields plus ``loss_mask`` (1 per assistant message, 0
per other message). An assistant turn a client of ``ratchet serve`` wrote
(:attr:`~ratchet.core.trajectory.Step.given`) is context, not the model's: its mask is 0, and
in a JSONL line it carries ``"weight": 0``, which OpenAI's fine-tuning format reads the same
way. Arrow needs one schema for every row, so messages are stored with a fixed
set of keys (see :func:`dataset_features`), ``tools`` as ``datasets.Json`` values, and the
full record as a JSON string. ``datasets`` is imported only when these functions run.

Where the model's tokenizer is known (``tokenizer=...``), lines and rows also carry
``input_ids`` and ``token_loss_mask``: the conversation's tokens as the ``local`` backend
renders it, 1 on the tokens the model generated (see :mod:`ratchet.engine.tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratchet.core.serialise import RecordError, from_dict, to_dict, to_json
from ratchet.core.trajectory import Trajectory, generated_turns
from ratchet.engine.tokens import token_ids

if TYPE_CHECKING:
    from datasets import Dataset, Features

RECORD_KEY = "ratchet"

# Keys a message keeps in a Dataset row; any other key survives only in the full record.
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def loss_mask(
    messages: Sequence[dict[str, Any]], generated: Sequence[bool] | None = None
) -> list[int]:
    """Return 1 for each assistant message (trained on) and 0 for every other message.

    Args:
        messages: The conversation.
        generated: Per assistant message, whether the model wrote it (see
            :func:`~ratchet.core.trajectory.generated_turns`); ``None``: every one.
    """
    mask, turn = [], 0
    for message in messages:
        assistant = message.get("role") == "assistant"
        mask.append(int(assistant and (generated is None or generated[turn])))
        turn += assistant
    return mask


def chat_record(
    trajectory: Trajectory, include_record: bool = True, tokenizer: Any = None
) -> dict[str, Any]:
    """Return one trajectory as a chat-format training example with metadata.

    Args:
        trajectory: The trajectory to export; its messages are copied unchanged, but for
            ``"weight": 0`` on the assistant turns a client wrote.
        include_record: Add the full trajectory under ``"ratchet"`` so it can be imported back.
        tokenizer: The model's tokenizer, to add ``input_ids`` and ``token_loss_mask``.
    """
    generated = iter(generated_turns(trajectory))
    messages = [
        m if m.get("role") != "assistant" or next(generated) else {**m, "weight": 0}
        for m in trajectory.messages
    ]
    record: dict[str, Any] = {
        "messages": messages,
        "tools": list(trajectory.tools),
        "task_id": trajectory.task.id,
        "env": trajectory.task.env,
        "split": trajectory.task.split,
        "agent": trajectory.agent,
        "model": trajectory.model,
        "sample": trajectory.sample,
        "passed": trajectory.passed,
        "score": trajectory.score,
    }
    if tokenizer is not None:
        record["input_ids"], record["token_loss_mask"] = token_ids(trajectory, tokenizer)
    if include_record:
        record[RECORD_KEY] = to_dict(trajectory)
    return record


def from_chat_record(record: dict[str, Any]) -> Trajectory:
    """Rebuild the trajectory from a :func:`chat_record` made with ``include_record=True``.

    Raises:
        ValueError: If the record has no full trajectory, or it does not parse.
    """
    full = record.get(RECORD_KEY) if isinstance(record, dict) else None
    if not isinstance(full, dict):
        raise ValueError(
            f"the record has no {RECORD_KEY!r} object with the full trajectory; "
            "export with include_record=True to import it back"
        )
    return _parse(full)


def write_jsonl(
    trajectories: Iterable[Trajectory],
    path: Path | str,
    include_record: bool = True,
    tokenizer: Any = None,
) -> int:
    """Write one :func:`chat_record` line per trajectory to ``path``; return the line count.

    Args:
        trajectories: What to export (e.g. ``t for _, t in store.trajectories(passed=True)``).
        path: The JSONL file to write (replaced if it exists).
        include_record: Add the full trajectory to each line so it can be imported back.
        tokenizer: The model's tokenizer, to add ``input_ids`` and ``token_loss_mask``.
    """
    count = 0
    with Path(path).open("w", encoding="utf-8") as out:
        for trajectory in trajectories:
            record = chat_record(trajectory, include_record, tokenizer)
            out.write(json.dumps(record, ensure_ascii=False))
            out.write("\n")
            count += 1
    return count


def read_jsonl(path: Path | str) -> list[Trajectory]:
    """Read trajectories back from a file written by :func:`write_jsonl`.

    Blank lines are skipped.

    Raises:
        ValueError: Naming the file and line of the first line that is not JSON or has no full
            trajectory.
    """
    trajectories: list[Trajectory] = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                trajectories.append(from_chat_record(json.loads(line)))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                raise ValueError(f"{path}:{number}: {exc}") from None
    return trajectories


def dataset_features() -> Features:
    """Return the ``datasets.Features`` of a :func:`to_dataset` dataset.

    Each message has exactly the keys in :data:`MESSAGE_KEYS`; absent ones are ``None``.
    ``content`` is a string or ``None``; ``tool_calls`` entries are OpenAI-format
    ``{id, type, function: {name, arguments}}`` with ``arguments`` a JSON string, as in the
    OpenAI API. ``tools`` holds the JSON-schema tool definitions as ``datasets.Json`` values,
    which decode back to dicts. ``ratchet`` (present when the full record is included) is the
    trajectory's JSON text.
    """
    from datasets import Features, Json, List, Value

    text = Value("string")
    tool_call = {"id": text, "type": text, "function": {"name": text, "arguments": text}}
    message = {
        "role": text,
        "content": text,
        "tool_calls": List(tool_call),
        "tool_call_id": text,
        "name": text,
    }
    return Features(
        {
            "messages": List(message),
            "tools": List(Json()),
            "loss_mask": List(Value("int8")),
            "task_id": text,
            "env": text,
            "split": text,
            "agent": text,
            "model": text,
            "sample": Value("int64"),
            "passed": Value("bool"),
            "score": Value("float64"),
            RECORD_KEY: text,
        }
    )


def to_dataset(
    trajectories: Iterable[Trajectory], include_record: bool = True, tokenizer: Any = None
) -> Dataset:
    """Return a Hugging Face ``datasets.Dataset`` with one row per trajectory.

    Columns: ``messages``, ``tools``, ``loss_mask`` and the metadata of :func:`chat_record`,
    plus ``ratchet`` (the full trajectory as JSON) when ``include_record`` is true and
    ``input_ids`` and ``token_loss_mask`` when a ``tokenizer`` is given. See
    :func:`dataset_features` for the exact schema.

    Raises:
        ValueError: If a message is not a dict with a string role, has non-text content, or
            has malformed ``tool_calls``.
    """
    from datasets import Dataset, List, Value

    features = dataset_features()
    if not include_record:
        del features[RECORD_KEY]
    if tokenizer is not None:
        features["input_ids"] = List(Value("int32"))
        features["token_loss_mask"] = List(Value("int8"))
    columns: dict[str, list[Any]] = {name: [] for name in features}
    for trajectory in trajectories:
        row = chat_record(trajectory, include_record=False, tokenizer=tokenizer)
        row["messages"] = [_dataset_message(m) for m in trajectory.messages]
        row["loss_mask"] = loss_mask(trajectory.messages, generated_turns(trajectory))
        if include_record:
            row[RECORD_KEY] = to_json(trajectory)
        for name, values in columns.items():
            values.append(row[name])
    return Dataset.from_dict(columns, features=features)


def from_dataset(dataset: Dataset) -> list[Trajectory]:
    """Rebuild the trajectories of a :func:`to_dataset` dataset made with the full record.

    Raises:
        ValueError: If the dataset has no ``ratchet`` column, or a row's record does not parse.
    """
    if RECORD_KEY not in dataset.column_names:
        raise ValueError(
            f"the dataset has no {RECORD_KEY!r} column with the full trajectories; "
            "export with include_record=True to import it back"
        )
    trajectories = []
    for index, text in enumerate(dataset[RECORD_KEY]):
        try:
            trajectories.append(_parse(json.loads(text)))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"dataset row {index}: {exc}") from None
    return trajectories


def _parse(full: dict[str, Any]) -> Trajectory:
    try:
        return from_dict(Trajectory, full)
    except RecordError as exc:
        raise ValueError(f"the full trajectory record is malformed: {exc}") from None


def _dataset_message(message: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ValueError(f"a message must be a dict with a string 'role'; got {message!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError(
            f"message content must be text or null for a dataset; got {type(content).__name__}"
        )
    row = {key: message.get(key) for key in MESSAGE_KEYS}
    if message.get("tool_calls") is not None:
        row["tool_calls"] = [_dataset_tool_call(call) for call in message["tool_calls"]]
    return row


def _dataset_tool_call(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError(f"a tool call must have a function with a name; got {call!r}")
    arguments = function.get("arguments", "{}")
    return {
        "id": call.get("id"),
        "type": call.get("type", "function"),
        "function": {
            "name": function["name"],
            # OpenAI sends arguments as a JSON string; a dict is encoded to match.
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }
