"""The progress display of long commands, kept clear of the warnings libraries print.

Libraries warn through :mod:`warnings` (transformers' and peft's deprecations during training,
say); the default printout, with its source line, lands between the progress bars and comes
again from every module that triggers it. Inside :func:`progress_display` each distinct warning
is instead logged once, as one line, like the command's other log lines.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from rich.markup import escape
from rich.progress import Progress

from ratchet.cli.options import console
from ratchet.engine.rollout import progress_bars


@contextlib.contextmanager
def progress_display(quiet: bool) -> Iterator[Progress | None]:
    """Yield the progress bars (``None`` when ``quiet``), logging warnings once each meanwhile."""
    with (
        warnings_logged_once(lambda line: console.print(line, highlight=False)),
        progress_bars(enabled=not quiet) as progress,
    ):
        yield progress


@contextlib.contextmanager
def warnings_logged_once(log: Callable[[str], None]) -> Iterator[None]:
    """Inside the block, pass each distinct warning to ``log`` once, as one line of markup.

    The warning filters are left as they are: what they ignore stays ignored.
    """
    seen: set[tuple[type[Warning], str]] = set()
    lock = threading.Lock()

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        text = " ".join(str(message).split())
        with lock:
            if (category, text) in seen:
                return
            seen.add((category, text))
        log(f"[yellow]warning[/] ({escape(_package(filename))}): {escape(text)}")

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _package(filename: str) -> str:
    """The installed package a warning came from (``transformers``), else the file's name."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts[:-1]:
            return parts[parts.index(marker) + 1].removesuffix(".py")
    return Path(filename).name
