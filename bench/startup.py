"""Start-up time of the ``ratchet`` command line, against another checkout's, in one run.

Runs ``ratchet --version``, ``--help``, ``envs`` and ``tasks calc`` with this checkout's sources
and with a baseline's (``--baseline SRC``, the ``src`` directory of another checkout, e.g. one at
the previous release), alternating, best of ``--repeats``; prints each command's seconds, the
ratio baseline/this, and a bare ``python -c pass`` for scale. Also lists which heavy modules a
plain ``import ratchet.cli`` loads. Measures; never asserts.
Run: ``python bench/startup.py [--baseline SRC] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--version"], ["--help"], ["envs"], ["tasks", "calc", "-n", "3"])
HEAVY = ("torch", "transformers", "peft", "llguidance", "matplotlib", "openvino")
HERE = Path(__file__).resolve().parent.parent / "src"


def seconds(command: list[str], source: Path | None) -> float:
    """Wall seconds of one run of ``command`` with ``source`` first on the path."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    started = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout's src")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cli = [sys.executable, "-c", "from ratchet.cli import app; app()"]
    bare = min(seconds([sys.executable, "-c", "pass"], None) for _ in range(args.repeats))
    print(f"bare python: {bare:.2f} s")
    for command in COMMANDS:
        ours, theirs = [], []
        for _ in range(args.repeats):
            ours.append(seconds(cli + command, HERE))
            if args.baseline is not None:
                theirs.append(seconds(cli + command, args.baseline))
        line = f"ratchet {' '.join(command):14s} {min(ours):5.2f} s"
        if theirs:
            line += f", baseline {min(theirs):5.2f} s, ratio {min(theirs) / min(ours):.2f}"
        print(line)
    probe = f"import sys, ratchet.cli; print(sorted(set({HEAVY!r}) & set(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(HERE)},
        capture_output=True,
        text=True,
        check=True,
    )
    print(f"heavy modules loaded by `import ratchet.cli`: {loaded.stdout.strip()}")


if __name__ == "__main__":
    main()
