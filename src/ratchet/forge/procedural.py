"""The procedural route: a source's tools and seeded worlds become a checked env, no model needed.

:func:`forge_tools` loads the source a reference names, forges its tasks
(:func:`ratchet.forge.tasks.forge_tasks`), builds the env (:func:`ratchet.forge.env.forged_env`)
with the version its pinned files give, checks it as ``ratchet check`` does, and writes it only
if it passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from ratchet.engine.models.base import Model
from ratchet.envs.registry import load_object
from ratchet.forge.config import ForgeConfig
from ratchet.forge.env import forged_env
from ratchet.forge.package import (
    CHECK_FILE,
    ENV_FILE,
    ENV_SOURCE,
    FORGE_FILE,
    TASKS_FILE,
    Forged,
    ForgeRefused,
    pin,
    pool_json,
    record_json,
    source_record,
    validate,
    version_of,
    writable,
    write_forged,
)
from ratchet.forge.source import Source
from ratchet.forge.tasks import forge_tasks


def forge_tools(
    reference: str,
    out: Path,
    config: ForgeConfig,
    model: Model | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> Forged:
    """Forge the source ``reference`` names (``file.py:attr`` or ``module:attr``) into ``out``.

    Args:
        reference: Where the :class:`~ratchet.forge.source.Source` is.
        out: The directory to write the env into.
        config: How to forge and check it.
        model: Rewords the instructions, each rewording checked for leaks (optional).
        log: Receives progress lines.

    Raises:
        ValueError: If the reference names no source, or the source cannot be forged.
        ForgeRefused: If the env fails ``ratchet check`` (nothing is written).
    """
    source = load_object(reference)
    if not isinstance(source, Source):
        raise ValueError(
            f"{reference} is a {type(source).__name__}, not a forge Source (see "
            "ratchet.forge.sqlite_source, object_source and mcp_source)"
        )
    writable(out)
    named, own_file = source_record(reference, out)
    pool, counts, survey = forge_tasks(source, config, model, log)
    tasks = json.dumps(pool_json(pool), indent=1).encode() + b"\n"
    pins = pin(out, {TASKS_FILE: tasks}, (own_file, *source.files))
    version = version_of(pins)
    env = forged_env(source, pool, version, survey.reads)
    log(f"checking {source.name} ({sum(counts.splits.values())} tasks)")
    report = validate(env, config)
    if not report.passed:
        failed = ", ".join(r.name for r in report.results if not r.passed)
        raise ForgeRefused(
            f"{source.name} fails ratchet check ({failed}); nothing was written", report.text()
        )
    record = {
        "route": "tools",
        "name": source.name,
        "source": {**named, "reference": reference},
        "version": version,
        "pins": pins,
        "writes": list(survey.writes),
        "reads": list(survey.reads),
        "worlds": source.worlds,
        "counts": counts.to_dict(),
        "config": asdict(config),
        "model": model.name if model is not None else None,
        "check": report.text().splitlines()[-1],
    }
    write_forged(
        out,
        {
            ENV_FILE: ENV_SOURCE.encode(),
            TASKS_FILE: tasks,
            FORGE_FILE: record_json(record),
            CHECK_FILE: (report.text() + "\n").encode(),
        },
    )
    return Forged(env, out, record, report)
