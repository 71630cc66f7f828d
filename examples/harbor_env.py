"""An env from Harbor task directories, run in Ratchet's sandbox.

``write_task`` writes one task in Harbor's format (``instruction.md``, ``task.toml``,
``environment/``, ``tests/test.sh`` writing ``/logs/verifier/reward.txt``, ``solution/solve.sh``);
this file writes 42 of them to a temporary folder and serves them with their own fixed splits.
Point ``harbor_env`` at a folder of real Harbor tasks the same way.

    ratchet check examples/harbor_env.py:env -n 10
    ratchet eval examples/harbor_env.py:env --model local -n 4
"""

import atexit
import random
import shutil
import tempfile
from pathlib import Path

from ratchet.integrations.harbor import harbor_env

TEST_SH = """#!/bin/bash
# Reward 1 if /app/answer.txt holds the sum of /app/numbers.txt.
if [ "$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)" = "{total}" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
SOLVE_SH = """#!/bin/bash
awk '{ s += $1 } END { print s }' /app/numbers.txt > /app/answer.txt
"""
TASK_TOML = """version = "1.0"

[metadata]
difficulty = "{difficulty}"
category = "shell"

[verifier]
timeout_sec = 30.0

[agent]
timeout_sec = 120.0
"""
DOCKERFILE = """FROM ubuntu:24.04
WORKDIR /app
COPY numbers.txt /app/numbers.txt
"""


def write_task(root: Path, name: str, numbers: list[int]) -> Path:
    """Write one Harbor task: sum the numbers in a file."""
    task = root / name
    for folder in ("environment", "tests", "solution"):
        (task / folder).mkdir(parents=True, exist_ok=True)
    (task / "instruction.md").write_text(
        "The file /app/numbers.txt lists whole numbers, one per line. "
        "Write their sum, and nothing else, to /app/answer.txt.\n"
    )
    difficulty = "easy" if len(numbers) <= 3 else "medium"
    (task / "task.toml").write_text(TASK_TOML.replace("{difficulty}", difficulty))
    (task / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (task / "environment" / "numbers.txt").write_text("".join(f"{n}\n" for n in numbers))
    (task / "tests" / "test.sh").write_text(TEST_SH.replace("{total}", str(sum(numbers))))
    (task / "solution" / "solve.sh").write_text(SOLVE_SH)
    return task


def write_tasks(root: Path, count: int = 42) -> list[str]:
    rng = random.Random(7)
    names = []
    for index in range(count):
        numbers = [rng.randrange(-50, 500) for _ in range(rng.choice([2, 3, 5, 8]))]
        names.append(write_task(root, f"sum-{index:02d}", numbers).name)
    return names


ROOT = Path(tempfile.mkdtemp(prefix="ratchet-harbor-example-"))
atexit.register(shutil.rmtree, ROOT, ignore_errors=True)
NAMES = write_tasks(ROOT)

env = harbor_env(
    ROOT,
    name="example/harbor-sums",
    description="Harbor tasks: sum the numbers in a file, in the sandbox.",
    splits={"train": NAMES[:20], "probe": NAMES[20:30], "test": NAMES[30:]},
)
