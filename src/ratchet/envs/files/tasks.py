"""Task families of the ``files`` env, and the ladder of difficulties they sit on.

**Difficulty ``d`` is the number of actions (without ``finish``) a task needs**: level 1 reads
one value, or moves or deletes one named file; each level adds one read, move, delete or write.
The tools list the workspace's files in their schemas, so no listing is needed to find them.

Every task's params carry the workspace (``world``: seed and size) and the expected end state:
``expect`` (path to ``{"text": ...}`` or ``{"json": ...}``), ``absent`` (paths that must be
gone), ``moves`` (``[source, destination]`` pairs the oracle performs), ``answer`` (facts the
final answer must state), ``exact`` (the answer must be those facts and nothing else), ``keep``
(every other starting file must be left untouched) and ``reads`` (the calls the oracle makes
to learn what it writes).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ratchet.core.task import TaskSpec, canonical_key
from ratchet.envs.files.world import Workspace, config_values, csv_rows, generate

FAMILIES = ("lookup", "find", "count", "extract", "transform", "reorganise")
MAX_DIFFICULTY = 5
LOOKUP_KEYS = ("port", "server.port", "database.user")
"""Keys asked about: their values cannot be guessed from a file's name (unlike ``service`` or
``database.name``) or by chance (unlike ``debug``)."""
_LEVELS: dict[int, tuple[str, ...]] = {
    1: ("lookup", "reorganise"),
    2: ("lookup", "find", "count", "extract", "transform", "reorganise"),
    3: ("lookup", "count", "extract", "reorganise"),
    4: ("lookup", "count", "extract", "reorganise"),
    5: ("lookup", "count", "extract", "reorganise"),
}
_SAVE = "Write {what} to {path} (and nothing else in that file), then call finish with it."
_DONE = "Call finish when done."

Params = dict[str, Any]


@dataclass(frozen=True)
class Draw:
    """A workspace drawn for one task.

    Attributes:
        seed: Its generation seed.
        size: Its size (1..5).
        files: The generated workspace.
    """

    seed: int
    size: int
    files: Workspace


def draw(rng: random.Random, size: int) -> Draw:
    """Draw a workspace of ``size``."""
    seed = rng.randrange(1_000_000_000)
    return Draw(seed, size, generate(seed, size))


def sample(rng: random.Random, difficulty: int) -> TaskSpec:
    """Draw one task of ``difficulty`` actions: a family of the level, a workspace, its choices.

    Raises:
        ValueError: If ``difficulty`` is outside ``1..MAX_DIFFICULTY``.
    """
    if difficulty not in _LEVELS:
        raise ValueError(f"files difficulty must be in 1..{MAX_DIFFICULTY}; got {difficulty}")
    family = rng.choice(_LEVELS[difficulty])
    found, instruction, params = _FAMILY[family](rng, difficulty)
    return TaskSpec(instruction, task_params(found, **params), family)


def problem_key(params: Params) -> str:
    """A task's problem: the changes and facts asked for, not the workspace they are made in.

    The workspace (``world``) and the content a moved file carries along are left out: two
    tasks that ask for the same moves, deletions, writes and facts are one problem whatever
    else their workspaces hold, or the same words and the same solution could sit in two
    splits, a training task and a test task passed by rote.
    """
    moved = {destination for _, destination in params.get("moves", [])}
    kept = {key: value for key, value in params.items() if key != "world"}
    kept["expect"] = {p: v for p, v in params.get("expect", {}).items() if p not in moved}
    return canonical_key(kept)


def task_params(found: Draw, **params: Any) -> Params:
    """Return complete task params: the workspace and ``params`` over the defaults."""
    base: Params = {"expect": {}, "absent": [], "moves": [], "answer": [], "exact": False}
    base |= {"keep": True, "reads": []}
    return {"world": {"seed": found.seed, "size": found.size}, **base, **params}


def lookup_task(pairs: list[tuple[str, str]], values: list[str]) -> tuple[str, Params]:
    """Word a question about config values, and its params (the answer is the values only).

    Args:
        pairs: ``(path, key)`` per value asked for.
        values: The values, in the same order.
    """
    asked = [f"'{key}' in {path}" for path, key in pairs]
    if len(asked) == 1:
        text = f"What is the value of {asked[0]}? Call finish with just the value."
    else:
        listed = ", ".join(asked[:-1]) + " and " + asked[-1]
        text = (
            f"What are the values of {listed}? Call finish with just the values, in that "
            "order, separated by commas."
        )
    reads = [_call("read_value", path=path, key=key) for path, key in pairs]
    return text, {"answer": values, "exact": True, "reads": reads}


def _lookup(rng: random.Random, difficulty: int) -> tuple[Draw, str, Params]:
    found = draw(rng, difficulty)
    pairs, values = _pick_values(rng, found.files, difficulty)
    text, params = lookup_task(pairs, values)
    return found, text, params


def _pick_values(
    rng: random.Random, ws: Workspace, count: int
) -> tuple[list[tuple[str, str]], list[str]]:
    configs = config_values(ws)
    pairs = [(path, key) for path, values in configs.items() for key in values]
    chosen = rng.sample([p for p in pairs if p[1] in LOOKUP_KEYS], count)
    return chosen, [configs[path][key] for path, key in chosen]


def _find(rng: random.Random, difficulty: int) -> tuple[Draw, str, Params]:
    found = draw(rng, 2)
    ws, path_file = found.files, "answer.txt"
    if ws.error_codes and rng.random() < 0.6:
        code = rng.choice(sorted(ws.error_codes))
        where = ws.error_codes[code]
        question = f"Which log file mentions error code {code}?"
        read = _call("search", pattern=code, path="logs")
    else:
        where = rng.choice(ws.paths("config/", ".json"))
        port = json.loads(ws.files[where])["port"]
        question = f"Which JSON config file sets port {port}?"
        read = _call("search", pattern=f'"port": {port}', path="config")
    save = _SAVE.format(what="its path relative to the workspace", path=path_file)
    params = {"expect": {path_file: {"text": where}}, "answer": [where], "reads": [read]}
    return found, f"{question} {save}", params


def _count(rng: random.Random, difficulty: int) -> tuple[Draw, str, Params]:
    found = draw(rng, difficulty)
    ws, path_file = found.files, "count.txt"
    if difficulty >= 3 or rng.random() < 0.5:
        level = rng.choice(("ERROR", "WARN", "INFO", "DEBUG"))
        chosen = rng.sample(ws.paths("logs/"), difficulty - 1)
        value = sum(
            line.split(" ")[2] == level for path in chosen for line in ws.files[path].splitlines()
        )
        scope = chosen[0]
        if len(chosen) > 1:
            scope = ", ".join(chosen[:-1]) + f" and {chosen[-1]} together"
        question = f"How many {level} lines are there in {scope}?"
    else:
        chosen = [rng.choice(ws.paths("data/"))]
        rows = csv_rows(ws.files[chosen[0]])
        city = rng.choice(sorted({row["city"] for row in rows}))
        value = sum(row["city"] == city for row in rows)
        question = f"How many rows of {chosen[0]} have the city {city}?"
    save = _SAVE.format(what="the number", path=path_file)
    params = {"expect": {path_file: {"text": str(value)}}, "answer": [str(value)]}
    return found, f"{question} {save}", {**params, "reads": [_read(p) for p in chosen]}


def _extract(rng: random.Random, difficulty: int) -> tuple[Draw, str, Params]:
    found = draw(rng, difficulty)
    ws = found.files
    if difficulty >= 3:
        pairs, values = _pick_values(rng, ws, difficulty - 1)
        listed = ", ".join(f"'{key}' in {path}" for path, key in pairs)
        text = (
            f"Write the values of {listed} to values.txt, one per line in that order (and "
            "nothing else in that file), then call finish with them."
        )
        reads = [_call("read_value", path=path, key=key) for path, key in pairs]
        params = {"expect": {"values.txt": {"text": "\n".join(values)}}, "answer": values}
        return found, text, {**params, "reads": reads}
    if rng.random() < 0.5:
        path = rng.choice(ws.paths("config/", ".ini"))
        section, key = rng.choice(
            (("server", "port"), ("server", "workers"), ("database", "user"), ("database", "name"))
        )
        value = config_values(ws)[path][f"{section}.{key}"]
        target = f"{key}.txt"
        text = f"Find the value of '{key}' in section [{section}] of {path}. " + _SAVE.format(
            what="the value", path=target
        )
        params = {"expect": {target: {"text": value}}, "answer": [value]}
        return found, text, {**params, "reads": [_read(path)]}
    table = rng.choice(ws.paths("data/"))
    rows = csv_rows(ws.files[table])
    city = rng.choice(sorted({row["city"] for row in rows}))
    names = sorted({row["name"] for row in rows if row["city"] == city})
    text = (
        f"List the distinct names in {table} whose city is {city}. Write them to names.txt, one "
        "per line in alphabetical order, then call finish listing them."
    )
    params = {"expect": {"names.txt": {"text": "\n".join(names)}}, "answer": names}
    return found, text, {**params, "reads": [_call("read_file", path=table)]}


def _transform(rng: random.Random, difficulty: int) -> tuple[Draw, str, Params]:
    found = draw(rng, 2)
    ws, choice = found.files, rng.randrange(3)
    if choice == 0:
        table = rng.choice(ws.paths("data/"))
        target = table.removesuffix(".csv") + ".json"
        rows = [
            {"id": int(r["id"]), "name": r["name"], "city": r["city"], "amount": int(r["amount"])}
            for r in csv_rows(ws.files[table])
        ]
        text = (
            f"Convert {table} to JSON: write {target} holding a list with one object per row, "
            "in file order, with keys id, name, city and amount (id and amount as integers). "
            f"Keep the CSV file. {_DONE}"
        )
        return found, text, {"expect": {target: {"json": rows}}, "reads": [_read(table)]}
    if choice == 1:
        path = rng.choice(ws.paths("config/", ".json"))
        config = json.loads(ws.files[path])
        key, value = rng.choice((("debug", not config["debug"]), ("replicas", rng.randint(7, 12))))
        config[key] = value
        text = (
            f"In {path}, set '{key}' to {json.dumps(value)} and keep every other key as it is. "
            f"The file must stay valid JSON. {_DONE}"
        )
        return found, text, {"expect": {path: {"json": config}}, "reads": [_read(path)]}
    path = rng.choice(ws.paths("logs/"))
    old, new = rng.choice((("WARN", "WARNING"), ("DEBUG", "TRACE"), ("INFO", "NOTICE")))
    lines = [_replace_level(line, old, new) for line in ws.files[path].splitlines()]
    text = (
        f"In {path}, change the level {old} to {new} on every line that has it (the third "
        f"field); leave everything else unchanged. {_DONE}"
    )
    return found, text, {"expect": {path: {"text": "\n".join(lines)}}, "reads": [_read(path)]}


def _reorganise(rng: random.Random, difficulty: int) -> tuple[Draw, str, Params]:
    choice = rng.randrange(3) if difficulty <= 3 else 0
    if choice == 0:
        return _named_changes(rng, difficulty)
    # Workspaces of size 2k - 2 and 2k - 1 hold k .tmp files, and k notes per year.
    found = draw(rng, rng.choice([s for s in (2 * difficulty - 2, 2 * difficulty - 1) if s]))
    ws = found.files
    if choice == 1:
        text = f"Delete every .tmp file in the workspace (in any folder). {_DONE}"
        return found, text, {"absent": ws.paths(suffix=".tmp")}
    folder = rng.choice(("archive", "old", "backup"))
    year = rng.choice(sorted({p.split("/")[1] for p in ws.paths("notes/", ".txt")}))
    moves = [[p, f"{folder}/{year}/{p.split('/')[-1]}"] for p in ws.paths(f"notes/{year}/")]
    text = (
        f"Move every note under notes/{year}/ into {folder}/{year}/, keeping the file names. "
        + _DONE
    )
    return found, text, _moved(ws, moves)


def _named_changes(rng: random.Random, count: int) -> tuple[Draw, str, Params]:
    """Move or delete ``count`` named files: stray .tmp files go, logs and notes are filed."""
    found = draw(rng, count)
    ws = found.files
    options: list[tuple[str, str | None]] = [(p, None) for p in ws.paths(suffix=".tmp")]
    options += [(p, f"logs/{p.split('/')[1].split('-')[0]}/") for p in ws.paths("logs/")]
    folder = rng.choice(("archive", "old", "backup"))
    options += [(p, f"{folder}/{p.split('/')[1]}/") for p in ws.paths("notes/", ".txt")]
    chosen = rng.sample(options, count)
    parts = [f"move {p} into {d}" if d else f"delete {p}" for p, d in chosen]
    moves = [[p, d + p.split("/")[-1]] for p, d in chosen if d]
    deleted = [p for p, d in chosen if d is None]
    params = _moved(ws, moves)
    text = "In the workspace: " + "; ".join(parts) + f". {_DONE}"
    return found, text, {**params, "absent": [*params["absent"], *deleted]}


def _moved(ws: Workspace, moves: list[list[str]]) -> Params:
    return {
        "moves": moves,
        "absent": [source for source, _ in moves],
        "expect": {dest: {"text": ws.files[source]} for source, dest in moves},
    }


def _call(name: str, **arguments: str) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _read(path: str) -> dict[str, Any]:
    return _call("read_file", path=path)


def _replace_level(line: str, old: str, new: str) -> str:
    fields = line.split(" ", 3)
    if fields[2] == old:
        fields[2] = new
    return " ".join(fields)


_FAMILY: dict[str, Callable[[random.Random, int], tuple[Draw, str, Params]]] = {
    "lookup": _lookup,
    "find": _find,
    "count": _count,
    "extract": _extract,
    "transform": _transform,
    "reorganise": _reorganise,
}
