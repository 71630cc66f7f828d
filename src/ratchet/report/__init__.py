"""HTML report and trajectory viewer for a run directory.

``write_report(run_dir)`` writes ``run_dir/report/index.html`` and one viewer page per linked
trajectory under ``run_dir/report/trajectories/``. Pages are self-contained: inline CSS, charts
as inline SVG (matplotlib), no scripts and no network requests, so a report can be mailed,
archived or opened offline.

An improvement run (one with ``summary.json``) gets the full report: headline, learning curve,
gate decisions, attribution, breakdowns, flips and cost. A directory holding only evaluation
runs gets their metrics and episode list.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ratchet.core.agent import AGENT_FILE, Agent
from ratchet.core.serialise import from_dict
from ratchet.improve.rundir import AGENTS_DIR
from ratchet.report.data import (
    ReportError,
    Stored,
    is_improve_run,
    load_evals,
    load_improve,
)
from ratchet.report.eval_page import eval_page
from ratchet.report.improve_page import improve_page, linked_trajectories
from ratchet.report.viewer import trajectory_page

__all__ = ["REPORT_DIR", "ReportError", "trajectory_page", "write_report"]

REPORT_DIR = "report"
TRAJECTORY_DIR = "trajectories"


def write_report(run_dir: Path) -> Path:
    """Write the HTML report of a run directory and return the path of its ``index.html``.

    Args:
        run_dir: A directory written by ``ratchet improve`` (with ``summary.json``) or one
            holding a store of evaluation runs.

    Returns:
        ``run_dir/report/index.html``.

    Raises:
        ReportError: If ``run_dir`` is not a run directory, or holds an unfinished
            improvement run, or its summary is malformed.
        StoreError: If its ``ratchet.db`` is empty or not a usable ratchet store (left as it
            was).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory")
    out = run_dir / REPORT_DIR
    if is_improve_run(run_dir):
        data = load_improve(run_dir)
        index = improve_page(data)
        linked = linked_trajectories(data)
        agents = data.agents
    else:
        runs = load_evals(run_dir)
        index = eval_page(runs)
        linked = [stored for run in runs for stored in run.trajectories]
        agents = _eval_agents(run_dir, [run.run.config for run in runs])
    pages = out / TRAJECTORY_DIR
    # Pages of an earlier report may no longer be linked; start from an empty directory.
    shutil.rmtree(pages, ignore_errors=True)
    pages.mkdir(parents=True)
    _write_pages(pages, linked, agents)
    return _write(out / "index.html", index)


def _write_pages(pages: Path, linked: list[Stored], agents: dict[str, Agent]) -> None:
    for trajectory_id, trajectory in linked:
        html = trajectory_page(trajectory_id, trajectory, agents.get(trajectory.agent))
        (pages / f"{trajectory_id}.html").write_text(html, encoding="utf-8")


def _write(path: Path, text: str) -> Path:
    """Write ``text`` atomically: a reader sees the old page or the new one, never half."""
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)
    return path


def _eval_agents(run_dir: Path, configs: list[dict[str, object]]) -> dict[str, Agent]:
    """Agents an evaluation used, from ``agents/*/`` or an agent directory named in its config."""
    candidates = list((run_dir / AGENTS_DIR).glob(f"*/{AGENT_FILE}"))
    for config in configs:
        reference = config.get("agent")
        if isinstance(reference, str) and (Path(reference) / AGENT_FILE).is_file():
            candidates.append(Path(reference) / AGENT_FILE)
    agents: dict[str, Agent] = {}
    for file in candidates:
        try:
            agent = from_dict(Agent, json.loads(file.read_text()))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue  # an unreadable agent file only costs the viewer its memory section
        agents[agent.version] = agent
    return agents
