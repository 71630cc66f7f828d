"""``ratchet forge``: an env from your own tools (no model needed) or from a spec (a model)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from ratchet.cli.options import (
    BaseUrl,
    build_config,
    config_options,
    console,
    errors,
    fail,
    load_model,
    with_options,
)
from ratchet.engine.models import Model, ModelError
from ratchet.envs.registry import EnvLoadError
from ratchet.forge import ForgeConfig, Forged, ForgeRefused, forge_spec, forge_tools

_REFERENCE = re.compile(r":[A-Za-z_]\w*$")


@with_options(config_options(ForgeConfig))
def forge(
    source_ref: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE",
            help="A forge Source (path/to/file.py:attr or package.module:attr; no model "
            "needed) or a plain-language spec file (SPEC.md; needs --model).",
        ),
    ],
    options: dict[str, Any],
    out: Annotated[
        Path | None, typer.Option(help="Directory to write the env into (default: forged/NAME).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="openai:NAME (with --base-url), local or fake: writes the env from a spec, "
            "or rewords a source's instructions (each rewording checked for leaks)."
        ),
    ] = None,
    base_url: BaseUrl = None,
) -> None:
    """Forge a verified env from your tools (no model) or from a spec (a model writes it).

    SOURCE is typed tools over a database, a Python object or an MCP server (a forge Source),
    or a plain-language spec a model turns into an env module run in the sandbox. Only an env
    that passes ratchet check is written; run it as DIR/env.py:env.
    """
    config = build_config(ForgeConfig, options)
    backend: Model | None = load_model(model, base_url, None, None) if model else None
    is_spec = not _REFERENCE.search(source_ref)
    if is_spec and backend is None:
        fail(f"{source_ref} is a spec: forging from a spec needs --model openai:NAME")
    target = out or Path("forged") / _slug(source_ref)
    say = lambda line: console.print(line, highlight=False, markup=False)  # noqa: E731
    try:
        if is_spec:
            assert backend is not None
            spec = Path(source_ref)
            if not spec.is_file():
                fail(f"no spec file {spec}")
            forged = forge_spec(spec, backend, target, config, say)
        else:
            forged = forge_tools(source_ref, target, config, backend, say)
    except ForgeRefused as refused:
        errors.print(refused.report, highlight=False, markup=False)
        fail(str(refused), code=1)
    except (ValueError, EnvLoadError, ModelError, FileExistsError) as exc:
        fail(str(exc))
    _summary(forged)


def _slug(reference: str) -> str:
    """The default directory name: the source file's or module's name, or the spec's."""
    stem = reference.rpartition(":")[0] if _REFERENCE.search(reference) else reference
    name = Path(stem.replace(".", "/") if not stem.endswith(".py") else stem).stem
    return re.sub(r"[^a-z0-9]+", "-", name.lower().removesuffix("_forge")).strip("-") or "env"


def _summary(forged: Forged) -> None:
    record = forged.record
    console.print(f"[green]{record['check']}[/]", highlight=False)
    counts = record["counts"]
    if record["route"] == "spec":
        console.print(f"written by {record['model']} after {record['repairs']} repairs")
    else:
        dropped = ", ".join(f"{n} {why}" for why, n in counts["dropped"].items()) or "none"
        console.print(f"walks kept per level {counts['kept']}; dropped: {dropped}", highlight=False)
    env = forged.directory / "env.py"
    console.print(f"env {record['name']} version {record['version']}: {env}:env", highlight=False)
    console.print(f"next: ratchet improve {env}:env --max-difficulty 2", highlight=False)
