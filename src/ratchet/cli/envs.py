"""Commands about envs: ``ratchet envs``, ``ratchet tasks``, ``ratchet check``."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from ratchet.cli.options import EnvRef, console, fail, load_env, parse_split
from ratchet.core.env import TooFewTasks, draw_tasks
from ratchet.core.serialise import to_dict
from ratchet.envs.check import CheckResult, check_env
from ratchet.envs.redteam import RED_TEAM
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
        drawn = draw_tasks(env, parse_split(split), n, seed=seed, difficulty=difficulty)
    except (ValueError, TooFewTasks) as exc:
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
    accept: Annotated[
        list[str] | None,
        typer.Option(
            metavar='CHECK="REASON"',
            help="Accept a red-team finding knowingly, with the reason (repeatable; reported as "
            "accepted, never hidden).",
        ),
    ] = None,
) -> None:
    """Check an env: schemas, determinism, oracle, null and forged policies, splits, red team."""
    env = load_env(env_ref)
    try:
        report = check_env(
            env, n=n, seed=seed, split_draws=split_draws, accept=_acceptances(accept or [])
        )
    except ValueError as exc:
        fail(str(exc))
    table = Table("check", "result", "detail", title=f"ratchet check {env_ref}")
    for result in report.results:
        table.add_row(result.name, *_shown(result))
    console.print(table)
    if report.left_out:
        console.print(f"[dim]{report.left_out_line()} (docs/envs.md#optional-members)[/]")
    if not report.passed:
        failed = sum(not r.passed and r.accepted is None for r in report.results)
        fail(f"{env_ref} fails {failed} check(s)", code=1)
    if report.accepted:
        reasons: dict[str, list[str]] = {}
        for result in report.accepted:
            reasons.setdefault(result.accepted or "", []).append(result.name)
        said = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in reasons.items())
        held = len(report.results) - len(report.accepted)
        console.print(
            f"[yellow]{env_ref} passes {held} of {len(report.results)} checks, with "
            f"{len(report.accepted)} red-team finding(s) accepted knowingly ({said})[/]",
            highlight=False,
        )
        return
    console.print(f"[green]{env_ref} passes all {len(report.results)} checks[/]")


def _shown(result: CheckResult) -> tuple[str, str]:
    """The result column and the detail of one check."""
    if result.accepted is not None:
        return "[yellow]accepted[/]", f"accepted: {result.accepted}; finding: {result.detail}"
    return ("[green]pass[/]" if result.passed else "[red]FAIL[/]"), result.detail


def _acceptances(given: list[str]) -> dict[str, str]:
    """``CHECK=REASON`` options as check name to reason (``red-team: `` may be left out)."""
    accepted = {}
    for item in given:
        name, sep, reason = item.partition("=")
        if not sep or not name.strip() or not reason.strip():
            fail(f'--accept takes CHECK="REASON"; got {item!r}')
        name = name.strip()
        if not name.startswith(RED_TEAM):
            name = f"{RED_TEAM}: {name}"
        accepted[name] = reason.strip()
    return accepted
