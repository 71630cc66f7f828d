"""The improvement report's task-level sections: where on the test split the gain landed.

Base and final agents' test episodes are paired by task and sample: pass@1 per task family and
difficulty, the tasks whose outcome flipped, and every paired episode, each linked to its
trajectory page.
"""

from __future__ import annotations

import ratchet.report.charts as charts
from ratchet.core.task import member_of
from ratchet.core.trajectory import Trajectory
from ratchet.report.data import Breakdown, Flip, ImproveRun, Stored, breakdown
from ratchet.report.html import badge, esc, figure, link, rate, shorten, signed_points, table

# Above this many, the flip tables show the first rows and say how many were left out.
MAX_FLIP_ROWS = 200


def breakdown_section(data: ImproveRun, base_runs: list[Stored], final_runs: list[Stored]) -> str:
    """Return base and final test pass@1 per task family and per difficulty (chart, tables)."""
    if not base_runs or not final_runs:
        return (
            "<h2>Before and after, by task family and difficulty</h2>"
            '<p class="note">The store holds no test episodes of base or final.</p>'
        )
    by_family = breakdown(base_runs, final_runs, data.k, lambda t: t.task.family)
    by_difficulty = breakdown(base_runs, final_runs, data.k, lambda t: str(t.task.difficulty))
    label = f"final ({data.final_version})"

    def rows(groups: list[Breakdown], prefix: str) -> list[list[str]]:
        return [
            [
                esc(prefix + g.group),
                str(g.tasks),
                rate(g.base),
                rate(g.final),
                signed_points(g.final - g.base),
            ]
            for g in groups
        ]

    headers = ["group", "test tasks", "base pass@1", f"{label} pass@1", "change"]
    envs = ""
    if len({member_of(t.task) for _, t in base_runs}) > 1:  # a suite: each env, each level
        by_env = breakdown(base_runs, final_runs, data.k, _env_level)
        whole = breakdown(base_runs, final_runs, data.k, lambda t: member_of(t.task))
        each = sorted(whole + by_env, key=lambda g: g.group)
        envs = "<h3>By env</h3>" + table(headers, rows(each, ""), numeric=(1, 2, 3, 4))
    return (
        "<h2>Before and after, by task family and difficulty</h2>"
        + figure(
            charts.breakdown_chart(by_family, by_difficulty, label),
            "Test pass@1 of base and final per group; the number of test tasks is in brackets.",
        )
        + '<div class="grid2"><div>'
        + table(headers, rows(by_family, ""), numeric=(1, 2, 3, 4))
        + "</div><div>"
        + table(headers, rows(by_difficulty, "level "), numeric=(1, 2, 3, 4))
        + "</div></div>"
        + envs
    )


def _env_level(trajectory: Trajectory) -> str:
    """A test episode's env and level: ``calc level 2``."""
    return f"{member_of(trajectory.task)} level {trajectory.task.difficulty}"


def flip_section(found: list[Flip], final_version: str) -> str:
    """Return the test tasks that flipped, fail to pass then pass to fail, linking both episodes."""
    fixed = [f for f in found if f.fixed]
    broken = [f for f in found if not f.fixed]
    parts = [
        "<h2>Flipped test tasks</h2>",
        '<p class="note">Test episodes whose outcome changed between base and final (paired by '
        "task and sample). Open both trajectories to see what the agent now does differently."
        "</p>",
    ]
    for title, flipped in (
        (f"fail → pass ({len(fixed)})", fixed),
        (f"pass → fail ({len(broken)})", broken),
    ):
        parts.append(f"<h3>{esc(title)}</h3>")
        if not flipped:
            parts.append('<p class="note">None.</p>')
            continue
        rows = [
            [
                esc(shorten(f.trajectory.task.instruction)),
                esc(f.trajectory.task.family),
                str(f.trajectory.task.difficulty),
                link(f"trajectories/{f.base_id}.html", f"base #{f.base_id}"),
                link(f"trajectories/{f.final_id}.html", f"{final_version} #{f.final_id}"),
            ]
            for f in flipped[:MAX_FLIP_ROWS]
        ]
        parts.append(table(["task", "family", "difficulty", "before", "after"], rows, numeric=(2,)))
        if len(flipped) > MAX_FLIP_ROWS:
            parts.append(f'<p class="note">{len(flipped) - MAX_FLIP_ROWS} more not shown.</p>')
    return "".join(parts)


def episodes_section(base_runs: list[Stored], final_runs: list[Stored], final: str) -> str:
    """Return every base test episode beside its final-agent pair, each with its outcome."""
    after = {(t.task.id, t.sample): (i, t) for i, t in final_runs}
    rows = []
    for base_id, trajectory in sorted(base_runs, key=lambda s: (s[1].task.family, s[1].task.id)):
        paired = after.get((trajectory.task.id, trajectory.sample))
        final_cell = "—"
        if paired is not None and final != "base":
            final_cell = f"{badge(paired[1].passed)} " + link(
                f"trajectories/{paired[0]}.html", f"#{paired[0]}"
            )
        rows.append(
            [
                esc(shorten(trajectory.task.instruction, 90)),
                esc(trajectory.task.family),
                str(trajectory.task.difficulty),
                str(trajectory.sample),
                f"{badge(trajectory.passed)} "
                + link(f"trajectories/{base_id}.html", f"#{base_id}"),
                final_cell,
            ]
        )
    return (
        f"<h2>All test episodes</h2><details><summary>{len(rows)} paired episodes of base and "
        f"{esc(final)}</summary>"
        + table(["task", "family", "difficulty", "sample", "base", final], rows, numeric=(2, 3))
        + "</details>"
    )
