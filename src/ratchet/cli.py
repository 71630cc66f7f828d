"""The ``ratchet`` command line: a thin layer over the library."""

from __future__ import annotations

import json
from importlib.metadata import version as package_version
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from ratchet.check import check_env
from ratchet.env import Env
from ratchet.registry import EnvLoadError, UnknownEnvError, env_names, make_env
from ratchet.task import SPLITS, Split

app = typer.Typer(
    name="ratchet",
    help="Make LLM agents better from their own verified experience.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as an error and exit with ``code`` (no traceback)."""
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def load_env(name: str) -> Env:
    """Return the env ``name`` or exit with a message listing the known envs."""
    try:
        return make_env(name)
    except (UnknownEnvError, EnvLoadError) as exc:
        fail(str(exc))


def parse_split(value: str) -> Split:
    """Return ``value`` as a split or exit with the allowed values."""
    for split in SPLITS:
        if value == split:
            return split
    fail(f"--split must be one of {', '.join(SPLITS)}; got {value!r}")


def _version(show: bool) -> None:
    if show:
        console.print(f"ratchet {package_version('ratchet')}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Make LLM agents better from their own verified experience."""


@app.command()
def envs() -> None:
    """List the available envs."""
    table = Table("env", "version", "max difficulty", "description")
    for name in env_names():
        try:
            env = make_env(name)
        except EnvLoadError as exc:
            table.add_row(name, "-", "-", f"[red]{exc}[/]")
            continue
        table.add_row(name, env.version, str(env.max_difficulty), env.description)
    console.print(table)


@app.command()
def tasks(
    env_name: Annotated[str, typer.Argument(metavar="ENV", help="Env name, e.g. calc.")],
    split: Annotated[str, typer.Option(help="train, probe or test.")] = "train",
    n: Annotated[int, typer.Option("-n", min=0, help="How many tasks.")] = 5,
    difficulty: Annotated[
        int | None, typer.Option(min=1, help="Only this difficulty (default: all levels).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for drawing tasks.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON task per line.")] = False,
) -> None:
    """Print tasks drawn from an env."""
    env = load_env(env_name)
    try:
        drawn = env.tasks(parse_split(split), n, seed=seed, difficulty=difficulty)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        for task in drawn:
            typer.echo(json.dumps(task.to_dict(), sort_keys=True))
        return
    table = Table("id", "difficulty", "family", "instruction", show_lines=True)
    for task in drawn:
        table.add_row(task.id, str(task.difficulty), task.family, task.instruction)
    console.print(table)


@app.command()
def check(
    env_name: Annotated[str, typer.Argument(metavar="ENV", help="Env name, e.g. calc.")],
    n: Annotated[int, typer.Option("-n", min=1, help="Test tasks per policy.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed for drawing tasks.")] = 0,
) -> None:
    """Check an env's conformance: schemas, determinism, oracle 1, null 0, forged claims 0."""
    report = check_env(load_env(env_name), n=n, seed=seed)
    table = Table("check", "result", "detail", title=f"ratchet check {env_name}")
    for result in report.results:
        mark = "[green]pass[/]" if result.passed else "[red]FAIL[/]"
        table.add_row(result.name, mark, result.detail)
    console.print(table)
    if not report.passed:
        fail(f"{env_name} fails {sum(not r.passed for r in report.results)} check(s)", code=1)
    console.print(f"[green]{env_name} passes all {len(report.results)} checks[/]")
