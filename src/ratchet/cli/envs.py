"""Commands about envs: ``ratchet envs``, ``ratchet tasks``, ``ratchet check``."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from ratchet.cli.options import EnvRef, console, fail, load_env, parse_split
from ratchet.core.records import to_dict
from ratchet.envs.check import check_env
from ratchet.envs.registry import EnvLoadError, env_names, make_env


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


def tasks(
    env_ref: EnvRef,
    split: Annotated[str, typer.Option(help="train, probe or test.")] = "train",
    n: Annotated[int, typer.Option("-n", min=0, max=100_000, help="How many tasks.")] = 5,
    difficulty: Annotated[
        int | None, typer.Option(min=1, help="Only this difficulty (default: all levels).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for drawing tasks.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON task per line.")] = False,
) -> None:
    """Print tasks drawn from an env."""
    env = load_env(env_ref)
    try:
        drawn = env.tasks(parse_split(split), n, seed=seed, difficulty=difficulty)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        for task in drawn:
            typer.echo(json.dumps(to_dict(task), sort_keys=True))
        return
    table = Table("id", "difficulty", "family", "instruction", show_lines=True)
    for task in drawn:
        table.add_row(task.id, str(task.difficulty), task.family, task.instruction)
    console.print(table)


def check(
    env_ref: EnvRef,
    n: Annotated[int, typer.Option("-n", min=1, max=100_000, help="Test tasks per policy.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed for drawing tasks.")] = 0,
    split_draws: Annotated[
        int, typer.Option(min=1, help="Tasks drawn per split and difficulty for the split check.")
    ] = 50,
) -> None:
    """Check an env: schemas, determinism, oracle, null and forged policies, splits, red team."""
    report = check_env(load_env(env_ref), n=n, seed=seed, split_draws=split_draws)
    table = Table("check", "result", "detail", title=f"ratchet check {env_ref}")
    for result in report.results:
        mark = "[green]pass[/]" if result.passed else "[red]FAIL[/]"
        table.add_row(result.name, mark, result.detail)
    console.print(table)
    if not report.passed:
        fail(f"{env_ref} fails {sum(not r.passed for r in report.results)} check(s)", code=1)
    console.print(f"[green]{env_ref} passes all {len(report.results)} checks[/]")
