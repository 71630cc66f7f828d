"""An env from Harbor task directories, run in Ratchet's sandbox.

``write_task`` writes one task in Harbor's format (``instruction.md``, ``task.toml``,
``environment/``, ``tests/test.sh`` writing ``/logs/verifier/reward.txt``, ``solution/solve.sh``);
this file writes 42 of them to a temporary folder and serves them with their own fixed splits.
Point ``harbor_env`` at a folder of real Harbor tasks the same way.

Each task asks for another figure of the numbers in its file (their sum or count above some
threshold, or of the multiples of some number), so each is its own problem: a task that only
changed the numbers in the file, with the same words and the same ``solve.sh``, would be the
same problem as every other (replaying an episode of one would solve them all), and
``ratchet check`` would fail its splits.

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
# Reward 1 if /app/answer.txt holds the expected figure of /app/numbers.txt.
if [ "$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)" = "{expected}" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
SOLVE_SH = """#!/bin/bash
awk '{select} {{ {gather} }} END {{ print {result} + 0 }}' /app/numbers.txt > /app/answer.txt
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


def write_task(root: Path, name: str, numbers: list[int], figure: str, rule: str, n: int) -> Path:
    """Write one Harbor task: a figure (``sum`` or ``count``) of the numbers that pass a rule.

    ``rule`` is ``above`` (greater than ``n``) or ``multiple`` (divisible by ``n``).
    """
    task = root / name
    for folder in ("environment", "tests", "solution"):
        (task / folder).mkdir(parents=True, exist_ok=True)
    kept = [x for x in numbers if (x > n if rule == "above" else x % n == 0)]
    which = f"greater than {n}" if rule == "above" else f"divisible by {n}"
    asked = "sum" if figure == "sum" else "count"
    (task / "instruction.md").write_text(
        "The file /app/numbers.txt lists whole numbers, one per line. Write the "
        f"{asked} of those {which} (0 if there are none), and nothing else, to /app/answer.txt.\n"
    )
    difficulty = "easy" if rule == "above" else "medium"
    (task / "task.toml").write_text(TASK_TOML.replace("{difficulty}", difficulty))
    (task / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (task / "environment" / "numbers.txt").write_text("".join(f"{x}\n" for x in numbers))
    expected = sum(kept) if figure == "sum" else len(kept)
    (task / "tests" / "test.sh").write_text(TEST_SH.replace("{expected}", str(expected)))
    select = f"$1 > {n}" if rule == "above" else f"$1 % {n} == 0"
    gather, result = ("s += $1", "s") if figure == "sum" else ("c += 1", "c")
    solve = SOLVE_SH.format(select=select, gather=gather, result=result)
    (task / "solution" / "solve.sh").write_text(solve)
    return task


def write_tasks(root: Path, count: int = 42) -> list[str]:
    """Write ``count`` tasks, each asking for a different figure; return their names."""
    rng = random.Random(7)
    asks = [(f, "above", n) for f in ("sum", "count") for n in range(0, 450, 25)]
    asks += [(f, "multiple", n) for f in ("sum", "count") for n in range(2, 10)]
    names = []
    for index, (figure, rule, n) in enumerate(rng.sample(asks, count)):
        numbers = [rng.randrange(-50, 500) for _ in range(rng.randrange(6, 13))]
        names.append(write_task(root, f"figure-{index:02d}", numbers, figure, rule, n).name)
    return names


ROOT = Path(tempfile.mkdtemp(prefix="ratchet-harbor-example-"))
atexit.register(shutil.rmtree, ROOT, ignore_errors=True)
NAMES = write_tasks(ROOT)

env = harbor_env(
    ROOT,
    name="example/harbor-figures",
    description="Harbor tasks: a figure of the numbers in a file, in the sandbox.",
    splits={"train": NAMES[:20], "probe": NAMES[20:30], "test": NAMES[30:]},
)
