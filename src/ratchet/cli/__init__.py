"""The ``ratchet`` command line: a thin layer over the library, one module per group of commands.

Options that mirror a library setting are derived from its config dataclass
(:mod:`ratchet.cli.options`), so defaults and help texts are declared once.
"""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Annotated

import typer

from ratchet.cli import envs, episodes, forge, improve, report, serve
from ratchet.cli.options import console, friendly

app = typer.Typer(
    name="ratchet",
    help="Make LLM agents better from their own verified experience.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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


app.command()(friendly(envs.envs))
app.command()(friendly(envs.tasks))
app.command()(friendly(envs.check))
app.command("eval")(friendly(episodes.evaluate))
app.command()(friendly(episodes.run))
app.command()(friendly(episodes.show))
app.command()(friendly(episodes.export))
app.command()(friendly(improve.improve))
app.command()(friendly(forge.forge))
app.command()(friendly(report.report))
app.command()(friendly(serve.serve))
