"""The results matrix: `ratchet improve` with the embedded model on every built-in env.

One row per env (and one more per env with the privileged `demos` lever), each a real
improvement run on the CPU, with settings chosen to fit about 25 minutes on 2 cores. Writes
``docs/results.md`` (the table, what each row means, the learning curves) and
``docs/results.json`` (the same rows, each with the exact command that reproduces it).

    python bench/improve_matrix.py                      # every env, self-improvement only
    python bench/improve_matrix.py --envs calc grid     # some envs
    python bench/improve_matrix.py --demos              # also the rows with the demos lever

Runs go to ``runs/matrix/<row>``; a row whose run already finished is read, not rerun, so the
matrix can be built up over several sessions (``--fresh`` reruns). A row with no run here is
carried over from ``docs/results.json`` if it was measured with the same command on the same
env version; each row names the commit it was measured at.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ratchet import ImproveConfig, cached_backends, improve, make_env

DOCS = Path(__file__).resolve().parents[1] / "docs"
GOAL = 0.30  # the gain in test pass@1 that each row aims for (stated on the page)


@dataclass(frozen=True)
class Row:
    """One matrix row: an env and the settings its run uses."""

    env: str
    config: ImproveConfig
    note: str = ""

    @property
    def name(self) -> str:
        demos = "-demos" if "demos" in self.config.levers else ""
        return f"{self.env}{demos}"


def rows(demos: bool) -> list[Row]:
    """The matrix's rows: each env at its lower levels, with a budget of about 25 minutes.

    Every row runs ``rft`` alone, which gains most per minute (docs/improve.md, levers
    compared; on calc 1-3, ``exemplars``, ``pairs`` and ``grpo`` added no accepted candidate
    after round 1, see its Measured section). calc's episodes are short, so its row affords
    four rounds; the other envs' prompts are 2-4x longer (file listings, policies, 15 tool
    schemas), so their rows run two rounds on fewer tasks.
    """
    base = ImproveConfig(env="calc", levers=("rft",), rounds=4, probe_tasks=32)
    longer = replace(base, rounds=2, train_tasks=24, probe_tasks=24)
    wider = replace(base.rollout, max_reply_tokens=64)
    roomy = replace(base.rollout, max_reply_tokens=96)
    chosen = [
        # Level 2 needs the second call to take the first's result: the base picks another
        # operand (0 of 98 level-2 training episodes passed without this). Copying restricts
        # operands to the numbers of the task and of the results so far.
        Row(
            "calc",
            replace(base, max_difficulty=3, train_tasks=48, explore_copy_arguments=True),
        ),
        # The base hardly moves: 3 move calls in 23 level-1 "go" training episodes (2 of them
        # through doors that are not there), against 52 looks. Half the training samples open
        # with a drawn tool instead and copy their arguments from the task (which names the
        # door) and the results.
        Row(
            "grid",
            replace(
                longer,
                env="grid",
                max_difficulty=2,
                explore_first_tool=True,
                explore_copy_arguments=True,
            ),
        ),
        # move_file and search calls need about 52 tokens: the CPU preset's 48 would cut them.
        # The base never calls read_value (0 of 180 level-1 episodes; a third open with
        # list_files and repeat it) and invents move destinations: half the training samples
        # open with a drawn tool instead and copy their arguments from the task and results.
        Row(
            "files",
            replace(
                longer,
                env="files",
                max_difficulty=2,
                rollout=wider,
                explore_first_tool=True,
                explore_copy_arguments=True,
            ),
        ),
        # Its calls need up to about 79 tokens (exchange_items) and its emails about 26
        # characters: at 48 the bounds cut emails and answers short (CapTooSmall warnings).
        # The base invents emails (none of 165 free calls found a customer): half the
        # training samples copy their arguments from the request and the tools' results. A
        # probe of 24 could not accept a round-2 candidate 21 points better (p = 0.09).
        Row(
            "shop",
            replace(
                longer,
                env="shop",
                max_difficulty=2,
                probe_tasks=48,
                rollout=roomy,
                explore_copy_arguments=True,
            ),
        ),
        # A level-1 solution (a def line and a return line) is about 50 characters of code:
        # at 48 tokens the bound left write_solution 28, so no solution could be written.
        Row("code", replace(longer, env="code", max_difficulty=2, rollout=roomy)),
    ]
    if demos:
        chosen += [
            Row(r.env, replace(r.config, levers=("demos", *r.config.levers)), "privileged")
            for r in chosen
        ]
    return chosen


def command(config: ImproveConfig, out: Path) -> str:
    """The ``ratchet improve`` command line that runs ``config`` (non-default settings only)."""
    default = ImproveConfig(env=config.env)
    parts = ["ratchet", "improve", config.env]
    for name, value in _leaves(config).items():
        if name == "env" or value == _leaves(default)[name]:
            continue
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            parts.append(flag if value else f"--no-{flag[2:]}")
        else:
            parts += [flag, ",".join(value) if isinstance(value, tuple) else str(value)]
    return " ".join([*parts, "--out", str(out)])


def _leaves(config: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found.update(_leaves(value))
        else:
            found[item.name] = value
    return found


def run(row: Row, out: Path, fresh: bool) -> dict[str, Any]:
    """Run (or read) one row and return its results record."""
    directory = out / row.name
    summary_file = directory / "summary.json"
    if fresh or not summary_file.exists():
        resume = (directory / "ratchet.db").exists() and not fresh
        started = time.perf_counter()
        improve(
            row.config,
            make_env(row.env),
            directory,
            cached_backends(),
            resume=resume,
            log=lambda line: print(f"[{row.name}] {line}", flush=True),
        )
        print(f"[{row.name}] {(time.perf_counter() - started) / 60:.1f} min", flush=True)
        (directory / "commit").write_text(_commit())
    summary = json.loads(summary_file.read_text())
    return record(row, summary, directory)


def _commit() -> str:
    """The checkout's commit, with ``-dirty`` if ``src/`` has uncommitted changes."""
    root = DOCS.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout

    dirty = "-dirty" if git("status", "--porcelain", "src").strip() else ""
    return git("rev-parse", "--short", "HEAD").strip() + dirty


def carried_over(row: Row, out: Path) -> dict[str, Any] | None:
    """``row``'s record in docs/results.json, if measured with today's command and env version."""
    path = DOCS / "results.json"
    if not path.exists():
        return None
    wanted = command(row.config, out / row.name)
    version = make_env(row.env).version
    for old in json.loads(path.read_text())["rows"]:
        if old.get("command") == wanted and old.get("env_version") == version:
            return dict(old)
    return None


def record(row: Row, summary: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The results.json row for one finished run."""
    base, final = summary["base"], summary["final"]
    gain = final["pass@1"] - base["pass@1"]
    headroom = 1 - base["pass@1"]
    accepted = [c["lever"] for r in summary["rounds"] for c in r["candidates"] if c.get("accepted")]
    curve = [
        {"round": r["round"], "version": r["incumbent"], "minutes": None, "test": None}
        for r in summary["rounds"]
    ]
    elapsed = 0.0
    for point, round_record in zip(curve, summary["rounds"], strict=True):
        elapsed += round_record["seconds"] / 60
        point["minutes"] = round(elapsed, 1)
        tested = summary.get("tested", {}).get(point["version"])
        point["test"] = tested["pass@1"] if tested else None
    commit_file = directory / "commit"
    return {
        "env": row.env,
        "env_version": make_env(row.env).version,
        "commit": commit_file.read_text().strip() if commit_file.exists() else None,
        "levers": list(row.config.levers),
        "privileged": "demos" in row.config.levers,
        "max_difficulty": row.config.max_difficulty,
        "base": {"pass@1": base["pass@1"], "ci95": base["ci95"], "n": base["n"]},
        "final": {"pass@1": final["pass@1"], "ci95": final["ci95"], "n": final["n"]},
        "final_version": summary["final_version"],
        "gain": gain,
        "by_level": {
            level: {"base": rates["pass@1"], "final": final["by_difficulty"][level]["pass@1"]}
            for level, rates in base.get("by_difficulty", {}).items()
            if level in final.get("by_difficulty", {})
        },
        "error_reduction": gain / headroom if headroom else 0.0,
        "separated": final["ci95"][0] > base["ci95"][1],
        "minutes": summary["seconds"] / 60,
        "tokens": summary["tokens"],
        "accepted_levers": accepted,
        "curve": curve,
        "command": command(row.config, directory),
    }


def write_docs(records: list[dict[str, Any]], out: Path) -> None:
    """Write docs/results.json, docs/results.md and the learning-curve figure."""
    (DOCS / "results.json").write_text(json.dumps({"rows": records}, indent=2) + "\n")
    figure = _curves(records)
    lines = [
        "# Results: self-improvement of the embedded 135M model on every env",
        "",
        "Produced by `python bench/improve_matrix.py` on 2 CPU cores (no GPU), with the "
        "embedded SmolLM2-135M-Instruct. Each row is one `ratchet improve` run; the numbers are "
        "test pass@1 on held-out tasks no decision saw, with 95% Wilson intervals. The goal "
        f"for each multi-step env is a gate-accepted final at least {100 * GOAL:.0f} points "
        "above the base, "
        "with the interval's lower end above the base's upper end. The gate probes the levels "
        "the curriculum has open; the test covers every level of the row, evenly.",
        "",
        "| env | levels | levers | base | final | gain | per level | error reduction | "
        "separated | goal | minutes | tokens | accepted | commit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        levers = ",".join(r["levers"]) + (" (privileged)" if r["privileged"] else "")
        lines.append(
            f"| {r['env']} | 1-{r['max_difficulty']} | {levers} | {_rate(r['base'])} | "
            f"{_rate(r['final'])} | {r['gain']:+.2f} | {_levels(r)} | {r['error_reduction']:.0%} | "
            f"{'yes' if r['separated'] else 'no'} | {_goal(r)} | {r['minutes']:.0f} | "
            f"{r['tokens']:,} | "
            f"{', '.join(r['accepted_levers']) or 'none'} | {r.get('commit') or '?'} |"
        )
    ran = {(r["env"], bool(r["privileged"])) for r in records}
    missing = sorted(row.env for row in rows(demos=False) if (row.env, False) not in ran)
    missing_demos = sorted(row.env for row in rows(demos=False) if (row.env, True) not in ran)
    if missing:
        lines += [
            "",
            f"Not run yet: {', '.join(missing)} "
            f"(`python bench/improve_matrix.py --envs {' '.join(missing)}`).",
        ]
    if missing_demos:
        lines += [
            "",
            f"Not run yet with `demos`: {', '.join(missing_demos)} "
            f"(`python bench/improve_matrix.py --demos --envs {' '.join(missing_demos)}`).",
        ]
    lines += [
        "",
        "What the rows say, and what was tried: [improve.md](improve.md#measured).",
        "",
        f"![learning curves]({figure.name})",
        "",
        "Commands:",
        "",
    ]
    lines += [f"- {r['env']}: `{r['command']}`" for r in records]
    (DOCS / "results.md").write_text("\n".join(lines) + "\n")


def _goal(record: dict[str, Any]) -> str:
    """Whether a row meets the goal (``GOAL`` and separated intervals), or by how much it misses."""
    if record["privileged"]:
        return "n/a (privileged)"
    short = GOAL - record["gain"]
    if short > 1e-9:
        return f"missed by {100 * short:.0f} points"
    return "met" if record["separated"] else "missed: intervals overlap"


def _rate(metrics: dict[str, Any]) -> str:
    low, high = metrics["ci95"]
    return f"{metrics['pass@1']:.2f} ({low:.2f}-{high:.2f})"


def _levels(record: dict[str, Any]) -> str:
    """Test pass@1 per difficulty, base -> final (e.g. ``L1 0.00->0.75, L2 0.00->0.08``)."""
    return ", ".join(
        f"L{level} {rates['base']:.2f}->{rates['final']:.2f}"
        for level, rates in sorted(record.get("by_level", {}).items())
    )


def _curves(records: list[dict[str, Any]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for r in records:
        points = [(0.0, r["base"]["pass@1"])]
        points += [(p["minutes"], p["test"]) for p in r["curve"] if p["test"] is not None]
        xs, ys = zip(*points, strict=True)
        style = "--" if r["privileged"] else "-"
        axes.plot(
            xs, ys, style, marker="o", label=r["env"] + (" + demos" if r["privileged"] else "")
        )
    axes.set_xlabel("minutes of improvement (2 CPU cores)")
    axes.set_ylabel("test pass@1")
    axes.set_ylim(0, 1)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path = DOCS / "results-curves.svg"
    figure.savefig(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--envs", nargs="+", default=None)
    parser.add_argument("--demos", action="store_true", help="also the rows with demos")
    parser.add_argument("--out", type=Path, default=Path("runs/matrix"))
    parser.add_argument("--fresh", action="store_true", help="rerun finished rows")
    args = parser.parse_args()
    chosen = [r for r in rows(args.demos) if args.envs is None or r.env in args.envs]
    for row in chosen:
        run(row, args.out, args.fresh)
    # The docs show every row that has finished, not only the ones run this time.
    records = []
    for row in rows(demos=True):
        if (args.out / row.name / "summary.json").exists():
            records.append(run(row, args.out, fresh=False))
        elif (old := carried_over(row, args.out)) is not None:
            records.append(old)
    for r in records:
        print(
            f"{r['env']:6} {'demos ' if r['privileged'] else ''}base {r['base']['pass@1']:.2f} "
            f"final {r['final']['pass@1']:.2f} gain {r['gain']:+.2f} "
            f"({r['minutes']:.0f} min, separated: {r['separated']})"
        )
    write_docs(records, args.out)


if __name__ == "__main__":
    main()
