"""`make demo` continues an interrupted demo; `make demo-fresh` starts over (dry runs only)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def dry_run(folder: Path, target: str) -> str:
    shutil.copy(ROOT / "Makefile", folder / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", folder / "pyproject.toml")
    # -o: take the virtualenv as built, so only the target's own commands are printed.
    command = ["make", "-n", "--no-print-directory", "-o", ".venv/.installed-stamp", target]
    # Run under `make test` too: the outer make's flags would otherwise reach this one.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    return subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, check=True
    ).stdout


def test_make_demo_starts_a_demo_then_resumes_the_one_it_started(tmp_path):
    first = dry_run(tmp_path, "demo")
    assert "ratchet improve calc --out runs/demo" in first and "--resume" not in first
    assert "rm -rf" not in first
    (tmp_path / "runs/demo/agents/base").mkdir(parents=True)
    (tmp_path / "runs/demo/agents/base/agent.json").write_text("{}")
    assert "--resume" in dry_run(tmp_path, "demo")


def test_make_demo_fresh_discards_the_demo_first(tmp_path):
    assert dry_run(tmp_path, "demo-fresh").startswith("rm -rf runs/demo\n")
