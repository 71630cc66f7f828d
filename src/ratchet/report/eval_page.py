"""The report of an evaluation-only run directory: its metrics and its episodes."""

from __future__ import annotations

import time
from collections import defaultdict

import ratchet.report.charts as charts
from ratchet.core.trajectory import Trajectory
from ratchet.engine.metrics import Metrics, summarize
from ratchet.report.data import EvalRun, eval_metrics
from ratchet.report.html import badge, count, esc, figure, link, page, rate, shorten, table


def eval_headline(runs: list[EvalRun]) -> str:
    """Return the one-sentence result of the latest evaluation run."""
    latest = runs[-1]
    metrics = eval_metrics(latest)
    if not metrics:
        return f"run {latest.run.id}: no episodes stored"
    envs = sorted({t.task.env for _, t in latest.trajectories})
    splits = sorted({t.task.split for _, t in latest.trajectories})
    parts = [
        f"{agent} pass@1 {m.pass_at_1:.2f} (95% CI {m.ci95[0]:.2f}-{m.ci95[1]:.2f})"
        for agent, m in metrics.items()
    ]
    tasks = max(m.n for m in metrics.values())
    samples = f", {latest.k} samples each" if latest.k > 1 else ""
    return f"{', '.join(envs)}: {'; '.join(parts)} on {tasks} {'/'.join(splits)} tasks{samples}"


def eval_page(runs: list[EvalRun]) -> str:
    """Return the report page of the evaluation runs in a store."""
    sections = [
        '<header class="top"><div class="eyebrow">Ratchet evaluation report</div>'
        f"<h1>{esc(eval_headline(runs))}</h1>"
        '<p class="lede">An evaluation run: agents played tasks and a verifier checked the '
        "state they left behind. No learning happened here.</p></header>"
    ]
    for run in reversed(runs):
        sections.append(_run_section(run))
    sections.append(
        "<footer><p><b>How to read this.</b> <i>pass@1</i> is the share of episodes the "
        "verifier passed; <i>pass@k</i> the chance that at least one of k samples passes; "
        "<i>pass^k</i> the chance that all k pass (consistency). Intervals are 95% Wilson "
        "intervals with one sample per task, and task-clustered bootstrap intervals with "
        "several.</p></footer>"
    )
    return page("Ratchet evaluation report", "\n".join(sections))


def _run_section(run: EvalRun) -> str:
    metrics = eval_metrics(run)
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.run.created))
    settings = ", ".join(f"{esc(k)}={esc(v)}" for k, v in sorted(run.run.config.items()))
    parts = [
        f"<h2>Run {esc(run.run.id)}</h2>",
        f'<p class="note">{esc(run.run.kind)} run, {esc(run.run.status)}, started '
        f"{esc(created)}. {settings}</p>",
    ]
    if not metrics:
        parts.append('<p class="note">No episodes stored.</p>')
        return "".join(parts)
    names = list(metrics)
    parts.append(
        figure(
            charts.eval_chart(
                names, [(m.pass_at_1, m.ci95[0], m.ci95[1]) for m in metrics.values()]
            ),
            "pass@1 per agent; whiskers are its 95% intervals (Wilson, or a task-clustered "
            "bootstrap for several samples per task).",
        )
    )
    parts.append(_metrics_table(metrics, run.k))
    parts.append(_groups_table(run))
    parts.append(_episode_table(run.trajectories))
    return "".join(parts)


def _metrics_table(metrics: dict[str, Metrics], k: int) -> str:
    rows = [
        [
            f"<b>{esc(agent)}</b>",
            str(m.n),
            rate(m.pass_at_1),
            f"{m.ci95[0]:.2f}-{m.ci95[1]:.2f}",
            rate(m.pass_at_k),
            rate(m.pass_hat_k),
            rate(m.mean_score),
            count(m.tokens_per_task),
            f"{m.seconds_per_task:.2f}",
            f"{m.errors_per_episode:.2f}",
        ]
        for agent, m in metrics.items()
    ]
    return table(
        [
            "agent",
            "tasks",
            "pass@1",
            "95% CI",
            f"pass@{k}",
            f"pass^{k}",
            "mean score",
            "tokens / task",
            "s / task",
            "errors / episode",
        ],
        rows,
        numeric=tuple(range(1, 10)),
    )


def _groups_table(run: EvalRun) -> str:
    groups: dict[tuple[str, str, str], list[Trajectory]] = defaultdict(list)
    for _, trajectory in run.trajectories:
        task = trajectory.task
        groups[(trajectory.agent, "family", task.family)].append(trajectory)
        groups[(trajectory.agent, "difficulty", f"level {task.difficulty}")].append(trajectory)
    rows = []
    for (agent, kind, name), trajectories in sorted(groups.items()):
        metrics = summarize(trajectories, run.k, per_difficulty=False)
        rows.append([esc(agent), esc(kind), esc(name), str(metrics.n), rate(metrics.pass_at_1)])
    return "<h3>By task family and difficulty</h3>" + table(
        ["agent", "grouped by", "group", "tasks", "pass@1"], rows, numeric=(3, 4)
    )


def _episode_table(trajectories: list[tuple[int, Trajectory]]) -> str:
    rows = [
        [
            link(f"trajectories/{i}.html", f"#{i}"),
            esc(shorten(t.task.instruction, 90)),
            esc(t.task.family),
            str(t.task.difficulty),
            esc(t.agent),
            str(t.sample),
            badge(None if t.verdict is None else t.passed),
            str(len(t.steps)),
            count(t.prompt_tokens + t.completion_tokens),
        ]
        for i, t in trajectories
    ]
    return f"<h3>Episodes ({len(rows)})</h3>" + table(
        ["id", "task", "family", "difficulty", "agent", "sample", "verdict", "turns", "tokens"],
        rows,
        numeric=(3, 5, 7, 8),
    )
