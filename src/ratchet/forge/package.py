"""Forged env directories: what ``ratchet forge`` writes, and loading one back, pins checked.

A forged env is a directory any command takes as ``DIR/env.py:env``:

- ``env.py``: three lines that load the directory (:func:`load_forged`);
- ``tasks.json``: the task pool, split by problem key;
- ``forge.json``: how it was forged (the route, the source or model, the counts, the settings)
  and the *pins*: the SHA-256 of every file the env's behaviour rests on (the source module
  and the files it names, or the model's module; ``tasks.json``);
- ``check.txt``: the ``ratchet check`` report it passed;
- on the spec route, ``module.py`` (the model's env) and ``spec.md`` (the spec it was given).

The env's version is a hash of the pinned files' contents, so a run names exactly what it
practised on; loading refuses a directory whose pinned files changed since it was forged.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ratchet.core.env import Env
from ratchet.core.pool import TaskPool
from ratchet.core.task import SPLITS, TaskSpec
from ratchet.envs.check import CheckReport, check_env
from ratchet.envs.registry import load_object
from ratchet.forge.config import ForgeConfig
from ratchet.forge.env import forged_env
from ratchet.forge.source import Source
from ratchet.forge.written import module_env

ENV_FILE = "env.py"
TASKS_FILE = "tasks.json"
FORGE_FILE = "forge.json"
CHECK_FILE = "check.txt"
MODULE_FILE = "module.py"
SPEC_FILE = "spec.md"
_OWN = {ENV_FILE, TASKS_FILE, FORGE_FILE, CHECK_FILE, MODULE_FILE, SPEC_FILE, "__pycache__"}

ENV_SOURCE = '''"""A forged env (ratchet forge); forge.json beside it says how it was made."""

from pathlib import Path

from ratchet.forge import load_forged

env = load_forged(Path(__file__).parent)
'''


@dataclass(frozen=True)
class Forged:
    """An env forged, checked and written.

    Attributes:
        env: The env.
        directory: Where it was written.
        record: What ``forge.json`` says.
        report: The check it passed.
    """

    env: Env
    directory: Path
    record: dict[str, Any]
    report: CheckReport


class ForgeRefused(Exception):
    """The forged env did not pass ``ratchet check``; nothing was written.

    Attributes:
        report: The last check report, as text.
        attempts: How many envs were checked (1 on the procedural route).
    """

    def __init__(self, message: str, report: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.report = report
        self.attempts = attempts


def validate(env: Env, config: ForgeConfig) -> CheckReport:
    """Run ``ratchet check`` on a forged env: the one validation both routes share."""
    return check_env(env, n=config.check_tasks, split_draws=config.split_draws)


def sha256(data: bytes) -> str:
    """The SHA-256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


def version_of(pins: Mapping[str, str]) -> str:
    """The env version the pinned files' hashes make: 12 hex digits."""
    return sha256(json.dumps(sorted(pins.values())).encode())[:12]


def pool_json(pool: TaskPool) -> dict[str, list[dict[str, Any]]]:
    """A task pool as JSON: per split, each task's instruction, params, family, difficulty."""
    return {split: [_spec_json(spec) for spec in getattr(pool, split)] for split in SPLITS}


def _spec_json(spec: TaskSpec) -> dict[str, Any]:
    return {k: v for k, v in asdict(spec).items() if v not in (None, False)}


def pool_from_json(data: Mapping[str, Any]) -> TaskPool:
    """The task pool :func:`pool_json` wrote.

    Raises:
        ValueError: If a split or task is malformed.
    """
    try:
        return TaskPool.from_splits(
            {split: [TaskSpec(**spec) for spec in specs] for split, specs in data.items()}
        )
    except TypeError as exc:
        raise ValueError(f"{TASKS_FILE} holds a malformed task: {exc}") from None


def pin(out: Path, inside: Mapping[str, bytes], outside: tuple[Path, ...]) -> dict[str, str]:
    """The pins of files to write into ``out`` and of ``outside`` files (paths from ``out``)."""
    pins = {name: sha256(data) for name, data in inside.items()}
    for path in outside:
        pins[os.path.relpath(path.resolve(), out.resolve())] = sha256(path.read_bytes())
    return pins


def writable(out: Path) -> None:
    """Refuse an ``out`` that holds anything but an earlier forged env (checked before forging).

    Raises:
        FileExistsError: If ``out`` holds anything that is not a forged env's.
    """
    if out.exists():
        entries = list(out.iterdir()) if out.is_dir() else [out]
        foreign = sorted(p.name for p in entries if p.name not in _OWN)
        if entries and (foreign or not (out / FORGE_FILE).is_file()):
            raise FileExistsError(
                f"{out} exists and is not a forged env (it holds {', '.join(foreign[:3])}); "
                "choose another --out"
            )


def write_forged(out: Path, files: Mapping[str, bytes]) -> None:
    """Write a forged env's files into ``out`` (replacing an earlier forged env there).

    Raises:
        FileExistsError: If ``out`` holds anything that is not a forged env's.
    """
    writable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
        raise


def read_record(directory: Path) -> dict[str, Any]:
    """The ``forge.json`` of a forged env, its pins checked against the files.

    Raises:
        ValueError: If the directory is not a forged env, or a pinned file is missing or
            changed since forging (the message names it).
    """
    record_path = directory / FORGE_FILE
    if not record_path.is_file():
        raise ValueError(f"{directory} is not a forged env: it has no {FORGE_FILE}")
    record: dict[str, Any] = json.loads(record_path.read_text())
    for name, digest in record.get("pins", {}).items():
        path = directory / name
        if not path.is_file():
            raise ValueError(f"{directory}: pinned file {name} is missing; forge the env again")
        if sha256(path.read_bytes()) != digest:
            raise ValueError(
                f"{directory}: {name} changed since the env was forged (its pinned SHA-256 was "
                f"{digest[:12]}...); forge the env again so its version names what it runs"
            )
    return record


def load_forged(directory: Path | str) -> Env:
    """The env a forged directory holds.

    Raises:
        ValueError: As :func:`read_record`, or if the source no longer loads.
    """
    directory = Path(directory)
    record = read_record(directory)
    pool = pool_from_json(json.loads((directory / TASKS_FILE).read_text()))
    if record["route"] == "spec":
        return module_env(
            (directory / MODULE_FILE).read_text(), pool, record["version"], record["name"]
        )
    source = load_source(record["source"], directory)
    if not isinstance(source, Source):
        raise ValueError(f"{record['source']['reference']} is no longer a forge Source")
    return forged_env(source, pool, record["version"], record["reads"])


def source_record(reference: str, out: Path) -> tuple[dict[str, str], Path]:
    """How ``forge.json`` names a source reference, and the source's own file.

    A file path is kept relative to ``out``, so the source and the forged env move together.
    """
    module, _, attr = reference.rpartition(":")
    if module.endswith(".py"):
        path = Path(module).resolve()
        return {"file": os.path.relpath(path, out.resolve()), "attr": attr}, path
    file = getattr(importlib.import_module(module), "__file__", None)
    if file is None:
        raise ValueError(f"{module} has no source file to pin")
    return {"module": module, "attr": attr}, Path(file)


def load_source(named: Mapping[str, str], directory: Path) -> object:
    """Load the source ``forge.json`` names (a file path is taken from ``directory``)."""
    if "file" in named:
        return load_object(f"{(directory / named['file']).resolve()}:{named['attr']}")
    return load_object(f"{named['module']}:{named['attr']}")


def record_json(record: Mapping[str, Any]) -> bytes:
    """``forge.json``'s bytes."""
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
