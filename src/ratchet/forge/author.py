"""The spec route: a model writes an env module from a spec; ``ratchet check`` judges it.

Failures go back to the model, for a bounded number of repairs.

The model is shown :data:`~ratchet.forge.written.CONTRACT` and the spec, and replies with the
module in a fenced ``python`` block. The module runs only in the sandbox
(:mod:`ratchet.forge.written`); its tasks are drawn once, then the env is checked exactly as
``ratchet check`` checks any env. A failing check report (or the error that stopped the module
loading or drawing tasks) goes back to the model as the next message. Only an env that passes
is written, with the spec, the model's name, the repair count and the report beside it; after
the last failed repair nothing is written and :class:`~ratchet.forge.package.ForgeRefused`
carries the last report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ratchet.core.env import Env
from ratchet.engine.models.base import Model, ModelError, Prompt, Sampling
from ratchet.envs.check import CheckReport
from ratchet.forge.config import ForgeConfig
from ratchet.forge.package import (
    CHECK_FILE,
    ENV_FILE,
    ENV_SOURCE,
    FORGE_FILE,
    MODULE_FILE,
    SPEC_FILE,
    TASKS_FILE,
    Forged,
    ForgeRefused,
    pin,
    pool_json,
    record_json,
    sha256,
    validate,
    version_of,
    writable,
    write_forged,
)
from ratchet.forge.written import CONTRACT, ModuleError, Worker, draw_pool, module_env, read_info

AUTHOR_TOKENS = 8192
AUTHOR_TEMPERATURE = 0.2
SYSTEM = (
    "You write environments for training tool-using agents, as Python modules that follow "
    "this contract exactly.\n\n" + CONTRACT + "\nReply with the whole module in one ```python "
    "code block."
)
REPAIR = (
    "The module does not pass yet. What failed:\n\n{report}\n\nFix it and reply with the whole "
    "corrected module in one ```python code block."
)
_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def module_code(reply: str) -> str | None:
    """The module in a model's reply: its longest fenced code block (``None``: none)."""
    blocks = _BLOCK.findall(reply)
    return max(blocks, key=len) if blocks else None


def forge_spec(
    spec: Path,
    model: Model,
    out: Path,
    config: ForgeConfig,
    log: Callable[[str], None] = lambda line: None,
) -> Forged:
    """Have ``model`` write an env from the spec file ``spec``; write it to ``out`` if it passes.

    Raises:
        ForgeRefused: If no module passed ``ratchet check`` within ``config.max_repairs``
            repairs (nothing is written).
        ModelError: If the model cannot be reached.
    """
    writable(out)
    text = spec.read_text()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": text},
    ]
    sampling = Sampling(temperature=AUTHOR_TEMPERATURE, max_tokens=AUTHOR_TOKENS, seed=config.seed)
    default_name = f"forge/{re.sub(r'[^a-z0-9]+', '-', spec.stem.lower()).strip('-') or 'env'}"
    report = ""
    for attempt in range(config.max_repairs + 1):
        reply = model.complete([Prompt(tuple(messages))], sampling)[0]
        if reply.error is not None:
            raise ModelError(f"{model.name} failed to answer: {reply.error}")
        code = module_code(reply.text)
        if code is None:
            report = "Your reply has no ```python code block holding the module."
        else:
            outcome = _attempt(code, default_name, out, config, log)
            if isinstance(outcome, _Passed):
                record = {
                    **outcome.record,
                    "model": model.name,
                    "repairs": attempt,
                    "spec": SPEC_FILE,
                    "spec_sha256": sha256(text.encode()),
                }
                files = {
                    **outcome.files,
                    SPEC_FILE: text.encode(),
                    FORGE_FILE: record_json(record),
                }
                write_forged(out, files)
                return Forged(outcome.env, out, record, outcome.report)
            report = outcome
        log(f"attempt {attempt + 1} of {config.max_repairs + 1} failed:\n{report}")
        messages += [
            {"role": "assistant", "content": reply.text},
            {"role": "user", "content": REPAIR.format(report=report)},
        ]
    raise ForgeRefused(
        f"{model.name}'s env did not pass ratchet check in {config.max_repairs + 1} attempts "
        f"({config.max_repairs} repairs); nothing was written",
        report,
        config.max_repairs + 1,
    )


@dataclass(frozen=True)
class _Passed:
    """A module that passed: its env and report, the files to write, its record so far."""

    env: Env
    report: CheckReport
    files: dict[str, bytes]
    record: dict[str, Any]


def _attempt(
    code: str, default_name: str, out: Path, config: ForgeConfig, log: Callable[[str], None]
) -> _Passed | str:
    """Load, draw and check one module: what to write if it passes, else what failed."""
    worker = Worker(code)
    try:
        info = read_info(worker, default_name)
        levels = min(info.max_difficulty, config.max_difficulty)
        pool, counts = draw_pool(worker, levels, config.tasks_per_level, config.seed)
        tasks = json.dumps(pool_json(pool), indent=1).encode() + b"\n"
        pins = pin(out, {MODULE_FILE: code.encode(), TASKS_FILE: tasks}, ())
        version = version_of(pins)
        env = module_env(code, pool, version, info.name, worker)
        log(f"checking {info.name} ({dict(counts)})")
        report = validate(env, config)
    except ModuleError as exc:
        worker.close()
        return f"The module failed before it could be checked:\n{exc}"
    if not report.passed:
        worker.close()
        return "ratchet check failed:\n" + report.text()
    record = {
        "route": "spec",
        "name": info.name,
        "version": version,
        "pins": pins,
        "counts": dict(counts),
        "config": asdict(config),
        "check": report.text().splitlines()[-1],
    }
    files = {
        ENV_FILE: ENV_SOURCE.encode(),
        MODULE_FILE: code.encode(),
        TASKS_FILE: tasks,
        CHECK_FILE: (report.text() + "\n").encode(),
    }
    return _Passed(env, report, files, record)
