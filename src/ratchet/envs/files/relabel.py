"""Hindsight relabelling for ``files``: name the changes a trajectory made, or the values it read.

A trajectory that moved, deleted or wrote files is named by those changes ("In the workspace:
move a to b; delete c. ..."), checked against the workspace state. One that changed nothing
but finished with values it had read from config files (``read_value``, or ``read_file`` of
the whole file) is named by a question about those values ("What is the value of 'port' in
config/auth.json?"), whose answer must be exactly those values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratchet.core.env import FINISH
from ratchet.core.task import TaskSpec
from ratchet.core.tool import Tool
from ratchet.envs.files.tasks import MAX_DIFFICULTY, Draw, lookup_task, task_params
from ratchet.envs.files.tools import tools
from ratchet.envs.files.verify import answer_parts
from ratchet.envs.files.workspace import build
from ratchet.envs.files.world import config_values

if TYPE_CHECKING:
    from ratchet.core.trajectory import Trajectory

_MAX_WRITTEN_CHARS = 1500


def relabel(trajectory: Trajectory) -> TaskSpec | None:
    """Name what the trajectory achieved in its workspace: file changes, else values read."""
    task = trajectory.task
    if "world" not in task.params:
        return None
    world = build(task)
    try:
        before = world.snapshot()
        by_name = {fn.__name__: Tool.from_function(fn) for fn in tools(world)}
        for step in trajectory.steps:
            if step.call is None or step.call.name == FINISH:
                break
            tool = by_name.get(step.call.name)
            if tool is not None:
                try:
                    tool(step.call.arguments)
                except Exception:  # a failed call changed nothing worth naming
                    continue
        after = world.snapshot()
        found = Draw(task.params["world"]["seed"], task.params["world"]["size"], world.start)
    finally:
        world.sandbox.close()
    return _changes(found, before, after) or _values_read(found, trajectory)


def _changes(
    found: Draw, before: dict[str, bytes | None], after: dict[str, bytes | None]
) -> TaskSpec | None:
    removed = sorted(p for p in before if p not in after)
    changed = sorted(p for p in after if before.get(p) != after[p])
    moves, deletes, writes = [], [], []
    expect: dict[str, Any] = {}
    for path in removed:
        content = before[path]
        dest = next((p for p in changed if p not in before and after[p] == content), None)
        if dest is None or content is None:
            deletes.append(path)
            continue
        changed.remove(dest)
        moves.append([path, dest])
        expect[dest] = {"text": content.decode()}
    for path in changed:
        data = after[path]
        try:
            text = data.decode() if data is not None else ""
        except UnicodeDecodeError:
            continue
        if 0 < len(text) <= _MAX_WRITTEN_CHARS and text.strip():
            writes.append(path)
            expect[path] = {"text": text}
    parts = [f"move {src} to {dest}" for src, dest in moves]
    parts += [f"delete {path}" for path in deletes]
    parts += [
        f"write {path} containing exactly:\n{expect[path]['text'].strip()}" for path in writes
    ]
    if not parts:
        return None
    params = task_params(found, expect=expect, absent=removed, moves=moves, keep=False)
    family = "transform" if writes else "reorganise"
    instruction = "In the workspace: " + "; ".join(parts) + ". Call finish when done."
    return TaskSpec(instruction, params, family, difficulty=min(MAX_DIFFICULTY, len(parts)))


def _values_read(found: Draw, trajectory: Trajectory) -> TaskSpec | None:
    """A question whose answer is exactly the values the trajectory read and submitted."""
    answer = _final_answer(trajectory)
    parts = answer_parts(answer) if answer else []
    if not parts or len(parts) > MAX_DIFFICULTY:
        return None
    configs = config_values(found.files)
    seen = _pairs_read(trajectory, configs)
    pairs = []
    for part in parts:
        pair = next((p for p in seen if configs[p[0]][p[1]].lower() == part), None)
        if pair is None:
            return None
        pairs.append(pair)
    values = [configs[path][key] for path, key in pairs]
    text, params = lookup_task(pairs, values)
    return TaskSpec(text, task_params(found, **params), "lookup", len(pairs))


def _final_answer(trajectory: Trajectory) -> str | None:
    for step in trajectory.steps:
        if step.call is not None and step.call.name == FINISH and not step.failed:
            return str(step.call.arguments.get("answer", ""))
    return None


def _pairs_read(
    trajectory: Trajectory, configs: dict[str, dict[str, str]]
) -> list[tuple[str, str]]:
    """The ``(path, key)`` values the trajectory saw, in the order it first saw them."""
    seen: list[tuple[str, str]] = []
    for step in trajectory.steps:
        call = step.call
        if call is None or step.failed:
            continue
        path = str(call.arguments.get("path", ""))
        if path not in configs:
            continue
        if call.name == "read_value":
            pairs = [(path, str(call.arguments.get("key", "")))]
        elif call.name == "read_file":
            pairs = [(path, key) for key in configs[path]]
        else:
            continue
        seen += [p for p in pairs if p[1] in configs[path] and p not in seen]
    return seen
