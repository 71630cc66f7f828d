"""``ratchet report``: the HTML report of a run."""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from ratchet.cli.options import console, fail


def report(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="An improve or eval run.")],
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the report in a web browser.")
    ] = False,
) -> None:
    """Write the HTML report of a run to RUN_DIR/report/index.html."""
    page = write_report(run_dir)
    console.print(f"report: {page}")
    if open_browser:
        webbrowser.open(page.resolve().as_uri())


def write_report(run_dir: Path) -> Path:
    """Write a run's report and return its page, or exit with a clear message."""
    try:
        from ratchet.report import ReportError
        from ratchet.report import write_report as write
    except ImportError as exc:
        fail(f"the report needs the report extra (pip install 'ratchet[report]'): {exc}")
    try:
        return write(run_dir)
    except ReportError as exc:
        fail(str(exc))
