"""Task families of the ``files`` env and their oracle.

Every task's params carry the workspace seed and the expected end state: ``expect`` (path to
``{"text": ...}`` or ``{"json": ...}``), ``absent`` (paths that must be gone), ``moves``
(``[source, destination]`` pairs the oracle performs), ``answer`` (facts the final answer must
state) and ``keep`` (whether every other starting file must be left untouched).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from ratchet.core.task import Task, TaskSpec
from ratchet.core.tool import ToolCall
from ratchet.envs.files.world import Workspace, csv_rows, generate

FAMILIES = ("find", "count", "extract", "transform", "reorganise")
_SAVE = "Write {what} to {path} (and nothing else in that file), then call finish with it."


def sample(rng: random.Random, difficulty: int) -> TaskSpec:
    """Draw one task: a workspace seed, a family and the family's choices."""
    seed = rng.randrange(1_000_000_000)
    workspace = generate(seed, difficulty)
    family = rng.choice(FAMILIES)
    instruction, params = _FAMILY[family](rng, workspace, difficulty)
    base = {"world": {"seed": seed, "size": difficulty}, "expect": {}, "absent": [], "moves": []}
    return TaskSpec(instruction, {**base, "answer": [], "keep": True, **params}, family)


def _find(rng: random.Random, ws: Workspace, difficulty: int) -> tuple[str, dict[str, Any]]:
    path_file = "answer.txt"
    if ws.error_codes and rng.random() < 0.6:
        code = rng.choice(sorted(ws.error_codes))
        found = ws.error_codes[code]
        question = f"Which log file mentions error code {code}?"
    else:
        configs = ws.paths("config/", ".json")
        found = rng.choice(configs)
        port = json.loads(ws.files[found])["port"]
        question = f"Which JSON config file sets port {port}?"
    save = _SAVE.format(what="its path relative to the workspace", path=path_file)
    return f"{question} {save}", {"expect": {path_file: {"text": found}}, "answer": [found]}


def _count(rng: random.Random, ws: Workspace, difficulty: int) -> tuple[str, dict[str, Any]]:
    path_file = "count.txt"
    if rng.random() < 0.5:
        level = rng.choice(("ERROR", "WARN", "INFO", "DEBUG"))
        logs = ws.paths("logs/")
        if difficulty >= 3:
            scope, chosen = "all log files under logs/", logs
        else:
            chosen = [rng.choice(logs)]
            scope = chosen[0]
        value = sum(
            line.split(" ")[2] == level for path in chosen for line in ws.files[path].splitlines()
        )
        question = f"How many {level} lines are there in {scope}?"
    else:
        table = rng.choice(ws.paths("data/"))
        rows = csv_rows(ws.files[table])
        city = rng.choice(sorted({row["city"] for row in rows}))
        value = sum(row["city"] == city for row in rows)
        question = f"How many rows of {table} have the city {city}?"
    save = _SAVE.format(what="the number", path=path_file)
    return f"{question} {save}", {
        "expect": {path_file: {"text": str(value)}},
        "answer": [str(value)],
    }


def _extract(rng: random.Random, ws: Workspace, difficulty: int) -> tuple[str, dict[str, Any]]:
    if rng.random() < 0.5:
        path = rng.choice(ws.paths("config/", ".ini"))
        section, key = rng.choice(
            (("server", "port"), ("server", "workers"), ("database", "user"), ("database", "name"))
        )
        value = _ini_value(ws.files[path], section, key)
        target = f"{key}.txt"
        instruction = (
            f"Find the value of '{key}' in section [{section}] of {path}. "
            + _SAVE.format(what="the value", path=target)
        )
        return instruction, {"expect": {target: {"text": value}}, "answer": [value]}
    table = rng.choice(ws.paths("data/"))
    rows = csv_rows(ws.files[table])
    city = rng.choice(sorted({row["city"] for row in rows}))
    names = sorted({row["name"] for row in rows if row["city"] == city})
    target = "names.txt"
    instruction = (
        f"List the distinct names in {table} whose city is {city}. Write them to {target}, one "
        "per line in alphabetical order, then call finish listing them."
    )
    return instruction, {"expect": {target: {"text": "\n".join(names)}}, "answer": names}


def _transform(rng: random.Random, ws: Workspace, difficulty: int) -> tuple[str, dict[str, Any]]:
    choice = rng.randrange(3)
    if choice == 0:
        table = rng.choice(ws.paths("data/"))
        target = table.removesuffix(".csv") + ".json"
        rows = [
            {"id": int(r["id"]), "name": r["name"], "city": r["city"], "amount": int(r["amount"])}
            for r in csv_rows(ws.files[table])
        ]
        instruction = (
            f"Convert {table} to JSON: write {target} holding a list with one object per row, "
            "in file order, with keys id, name, city and amount (id and amount as integers). "
            "Keep the CSV file. Call finish when done."
        )
        return instruction, {"expect": {target: {"json": rows}}}
    if choice == 1:
        path = rng.choice(ws.paths("config/", ".json"))
        config = json.loads(ws.files[path])
        key, value = rng.choice((("debug", not config["debug"]), ("replicas", rng.randint(7, 12))))
        config[key] = value
        instruction = (
            f"In {path}, set '{key}' to {json.dumps(value)} and keep every other key as it is. "
            "The file must stay valid JSON. Call finish when done."
        )
        return instruction, {"expect": {path: {"json": config}}}
    path = rng.choice(ws.paths("logs/"))
    old, new = rng.choice((("WARN", "WARNING"), ("DEBUG", "TRACE"), ("INFO", "NOTICE")))
    lines = [_replace_level(line, old, new) for line in ws.files[path].splitlines()]
    instruction = (
        f"In {path}, change the level {old} to {new} on every line that has it (the third "
        "field); leave everything else unchanged. Call finish when done."
    )
    return instruction, {"expect": {path: {"text": "\n".join(lines)}}}


def _reorganise(rng: random.Random, ws: Workspace, difficulty: int) -> tuple[str, dict[str, Any]]:
    choice = rng.randrange(3)
    if choice == 0:
        temps = ws.paths(suffix=".tmp")
        instruction = (
            "Delete every .tmp file in the workspace (in any folder). Call finish when done."
        )
        return instruction, {"absent": temps}
    if choice == 1:
        folder = rng.choice(("archive", "old", "backup"))
        year = rng.choice(sorted({p.split("/")[1] for p in ws.paths("notes/", ".txt")}))
        notes = ws.paths(f"notes/{year}/", ".txt")
        moves = [[p, f"{folder}/{year}/{p.split('/')[-1]}"] for p in notes]
        instruction = (
            f"Move every note under notes/{year}/ into {folder}/{year}/, keeping the file "
            "names. Call finish when done."
        )
        return instruction, _moved(ws, moves)
    logs = ws.paths("logs/")
    picked = rng.sample(logs, min(len(logs), 1 + difficulty // 2))
    moves = [[p, f"logs/{p.split('/')[1].split('-')[0]}/{p.split('/')[1]}"] for p in picked]
    wanted = ", ".join(p for p, _ in moves)
    instruction = (
        f"Move each of these logs into a folder named after its service under logs/ (e.g. "
        f"logs/auth-2024-03-10.log goes to logs/auth/auth-2024-03-10.log): {wanted}. "
        "Call finish when done."
    )
    return instruction, _moved(ws, moves)


def _moved(ws: Workspace, moves: list[list[str]]) -> dict[str, Any]:
    return {
        "moves": moves,
        "absent": [source for source, _ in moves],
        "expect": {dest: {"text": ws.files[source]} for source, dest in moves},
    }


def _ini_value(text: str, section: str, key: str) -> str:
    current = ""
    for line in text.splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section and line.split("=")[0].strip() == key:
            return line.split("=", 1)[1].strip()
    raise KeyError(f"{section}.{key}")


def _replace_level(line: str, old: str, new: str) -> str:
    fields = line.split(" ", 3)
    if fields[2] == old:
        fields[2] = new
    return " ".join(fields)


_FAMILY: dict[str, Callable[[random.Random, Workspace, int], tuple[str, dict[str, Any]]]] = {
    "find": _find,
    "count": _count,
    "extract": _extract,
    "transform": _transform,
    "reorganise": _reorganise,
}


def solve(task: Task) -> list[ToolCall]:
    """The oracle: perform the moves, write the expected files, delete the rest, finish."""
    params = task.params
    moved = {dest for _, dest in params["moves"]}
    calls = [ToolCall("move_file", {"source": s, "destination": d}) for s, d in params["moves"]]
    for path, want in params["expect"].items():
        if path in moved:
            continue
        content = want["text"] if "text" in want else json.dumps(want["json"], indent=2)
        calls.append(ToolCall("write_file", {"path": path, "content": content + "\n"}))
    sources = {source for source, _ in params["moves"]}
    calls += [ToolCall("delete_file", {"path": p}) for p in params["absent"] if p not in sources]
    answer = ", ".join(params["answer"]) if params["answer"] else "done"
    return [*calls, ToolCall("finish", {"answer": answer})]
