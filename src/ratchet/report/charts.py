"""The report's charts, drawn with matplotlib and returned as inline SVG text.

Figures are built with ``matplotlib.figure.Figure`` directly (no pyplot, so no global state and
no GUI backend). Text stays text in the SVG (``svg.fonttype = none``), which keeps the files
small and lets the browser's fonts render it; the XML prologue, the external DTD reference
and the metadata block are dropped so the SVG can sit inside the HTML page without pointing
anywhere.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from matplotlib.typing import RcKeyType

from ratchet.report.data import Attribution, Breakdown, CurvePoint

BASE = "#8c959f"
FINAL = "#0969da"
PROBE = "#bc4c00"
GOOD = "#1a7f37"
BAD = "#cf222e"
INK = "#1f2328"
MUTED = "#656d76"
GRID = "#d8dee4"

_STYLE: dict[RcKeyType, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["Helvetica Neue", "Arial", "DejaVu Sans"],
    "font.size": 10,
    "axes.edgecolor": GRID,
    "axes.labelcolor": INK,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "xtick.color": MUTED,
    "ytick.color": MUTED,
    "legend.frameon": False,
}


def _svg(figure: Figure, name: str) -> str:
    """Render ``figure`` to SVG markup fit for inlining; ``name`` keeps element ids unique."""
    buffer = io.StringIO()
    # Both are read at save time. A distinct hash salt per chart keeps clip-path ids distinct
    # between the charts of one page; text kept as text needs no embedded glyph paths.
    saving: dict[RcKeyType, Any] = {"svg.hashsalt": f"ratchet-{name}", "svg.fonttype": "none"}
    with matplotlib.rc_context(saving):
        figure.savefig(
            buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None}
        )
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    return text.replace("<svg ", f'<svg role="img" aria-label="{name} chart" ', 1)


def _percent_axis(axes: Axes, axis: str = "y") -> None:
    ticks = [0.0, 0.25, 0.5, 0.75, 1.0]
    labels = [f"{round(t * 100)}%" for t in ticks]
    if axis == "y":
        axes.set_ylim(0, 1.04)
        axes.set_yticks(ticks, labels)
        axes.grid(axis="y", color=GRID, linewidth=0.6)
    else:
        axes.set_xlim(0, 1.04)
        axes.set_xticks(ticks, labels)
        axes.grid(axis="x", color=GRID, linewidth=0.6)
    axes.set_axisbelow(True)


def headline_chart(base: dict[str, Any], final: dict[str, Any], final_label: str) -> str:
    """Grouped bars of base and final test metrics; pass@1 carries its 95% interval."""
    k = int(base.get("k", 1))
    metrics = [("pass@1", "pass@1"), ("mean score", "mean_score")]
    if k > 1:
        metrics += [(f"pass@{k}", "pass@k"), (f"pass^{k}", "pass^k")]
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(6.4, 1.1 + 0.55 * len(metrics)))
        axes = figure.subplots()
        height = 0.36
        for offset, (label, values, color) in enumerate(
            (("base", base, BASE), (final_label, final, FINAL))
        ):
            positions = [i + (offset - 0.5) * height for i in range(len(metrics))]
            widths = [float(values[key]) for _, key in metrics]
            low, high = values.get("ci95", (widths[0], widths[0]))
            errors = [[widths[0] - low] + [0] * (len(metrics) - 1)]
            errors.append([high - widths[0]] + [0] * (len(metrics) - 1))
            axes.barh(positions, widths, height=height, color=color, label=label)
            axes.errorbar(
                widths[:1],
                positions[:1],
                xerr=[errors[0][:1], errors[1][:1]],
                fmt="none",
                ecolor=INK,
                capsize=3,
                linewidth=1,
            )
            ends = [max(widths[0], high), *widths[1:]]
            for y, width, end in zip(positions, widths, ends, strict=True):
                axes.text(end + 0.015, y, f"{width:.2f}", va="center", fontsize=9)
        axes.set_yticks(range(len(metrics)), [label for label, _ in metrics])
        axes.invert_yaxis()
        _percent_axis(axes, "x")
        axes.set_xlim(0, 1.12)
        axes.legend(loc="lower right", ncols=2, bbox_to_anchor=(1.0, 1.0))
        axes.set_title("Held-out test split", pad=6)
    return _svg(figure, "headline")


def curve_chart(points: Sequence[CurvePoint]) -> str:
    """Probe and test pass@1 of the incumbent after each round, against tokens and wall time."""
    seconds = [p.seconds for p in points]
    minutes = max(seconds, default=0.0) >= 120
    times = [s / 60 if minutes else s for s in seconds]
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(10, 3.4))
        axes_pair = figure.subplots(1, 2, sharey=True)
        xs_by_panel: tuple[list[float], list[float]] = ([float(p.tokens) for p in points], times)
        labels = ("tokens (training + probe episodes)", "minutes" if minutes else "seconds")
        for axes, xs, label in zip(axes_pair, xs_by_panel, labels, strict=True):
            probe_x = [x for x, p in zip(xs, points, strict=True) if p.probe is not None]
            probe_y = [p.probe for p in points if p.probe is not None]
            if probe_x:
                axes.plot(probe_x, probe_y, "o-", color=PROBE, label="probe pass@1")
            test_x = [x for x, p in zip(xs, points, strict=True) if p.test is not None]
            test_y = [p.test for p in points if p.test is not None]
            intervals = [p.test_ci or (p.test, p.test) for p in points if p.test is not None]
            if test_x:
                lows = [y - low for y, (low, _) in zip(test_y, intervals, strict=True)]
                highs = [high - y for y, (_, high) in zip(test_y, intervals, strict=True)]
                axes.errorbar(
                    test_x,
                    test_y,
                    yerr=[lows, highs],
                    fmt="s-",
                    color=FINAL,
                    capsize=3,
                    label="test pass@1 (95% CI)",
                )
            for x, point in zip(xs, points, strict=True):
                if point.accepted is not None:
                    axes.axvline(x, color=GOOD, linewidth=0.8, linestyle=":", zorder=0)
                    # Above the plot area, where no curve can hide it.
                    axes.text(
                        x,
                        1.02,
                        f"{point.version} ({point.accepted})",
                        transform=axes.get_xaxis_transform(),
                        fontsize=8,
                        color=GOOD,
                        ha="center",
                        va="bottom",
                    )
            axes.set_xlabel(label)
            axes.set_xlim(left=0)
            _percent_axis(axes)
        axes_pair[0].ticklabel_format(axis="x", style="plain")
        axes_pair[0].xaxis.set_major_formatter(
            FuncFormatter(lambda v, _: f"{v / 1000:g}k" if v >= 1000 else f"{v:g}")
        )
        axes_pair[0].set_ylabel("pass@1 of the incumbent")
        axes_pair[1].legend(loc="lower right")
        figure.tight_layout()
    return _svg(figure, "curve")


def breakdown_chart(
    by_family: Sequence[Breakdown], by_difficulty: Sequence[Breakdown], final_label: str
) -> str:
    """Base and final test pass@1 per task family and per difficulty, side by side."""
    rows = max(len(by_family), len(by_difficulty), 1)
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(10, 1.3 + 0.5 * rows))
        panels = figure.subplots(1, 2)
        for axes, groups, title in zip(
            panels, (by_family, by_difficulty), ("By task family", "By difficulty"), strict=True
        ):
            height = 0.38
            for offset, (label, color) in enumerate(((("base"), BASE), (final_label, FINAL))):
                values = [g.base if offset == 0 else g.final for g in groups]
                positions = [i + (offset - 0.5) * height for i in range(len(groups))]
                axes.barh(positions, values, height=height, color=color, label=label)
                for y, value in zip(positions, values, strict=True):
                    axes.text(value + 0.012, y, f"{value:.2f}", va="center", fontsize=8)
            names = [g.group if not g.group.isdigit() else f"level {g.group}" for g in groups]
            axes.set_yticks(
                range(len(groups)), [f"{n} ({g.tasks})" for n, g in zip(names, groups, strict=True)]
            )
            axes.invert_yaxis()
            _percent_axis(axes, "x")
            axes.set_xlim(0, 1.14)
            axes.set_title(title, pad=6)
        panels[1].legend(loc="lower right", ncols=2, bbox_to_anchor=(1.0, 1.0))
        figure.tight_layout()
    return _svg(figure, "breakdown")


def attribution_chart(base: float, steps: Sequence[Attribution], final: float) -> str:
    """A waterfall from base to final test pass@1, one step per accepted version."""
    labels = ["base"]
    bottoms, heights, colors = [0.0], [base], [BASE]
    level = base
    for step in steps:
        after = step.test_after if step.test_after is not None else level
        labels.append(f"{step.version}\n{step.lever}")
        bottoms.append(min(level, after))
        heights.append(abs(after - level))
        colors.append(GOOD if after >= level else BAD)
        level = after
    labels.append("final")
    bottoms.append(0.0)
    heights.append(final)
    colors.append(FINAL)
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(1.6 + 1.0 * len(labels), 3.0))
        axes = figure.subplots()
        positions = list(range(len(labels)))
        axes.bar(positions, heights, bottom=bottoms, color=colors, width=0.6)
        for x, bottom, height, color in zip(positions, bottoms, heights, colors, strict=True):
            delta = color in (GOOD, BAD)
            text = f"{(height if color == GOOD else -height) * 100:+.0f} pts" if delta else ""
            axes.text(x, bottom + height + 0.02, text or f"{height:.2f}", ha="center", fontsize=9)
        axes.set_xticks(positions, labels)
        _percent_axis(axes)
        axes.set_ylim(0, 1.12)
        axes.set_title("Test pass@1, step by step", pad=6)
        figure.tight_layout()
    return _svg(figure, "attribution")


def eval_chart(names: Sequence[str], values: Sequence[tuple[float, float, float]]) -> str:
    """Pass@1 with its 95% interval for each agent of an evaluation run."""
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(6.4, 1.0 + 0.45 * len(names)))
        axes = figure.subplots()
        positions = list(range(len(names)))
        means = [v[0] for v in values]
        errors = [[v[0] - v[1] for v in values], [v[2] - v[0] for v in values]]
        axes.barh(positions, means, height=0.5, color=FINAL)
        axes.errorbar(means, positions, xerr=errors, fmt="none", ecolor=INK, capsize=3)
        for y, value in zip(positions, means, strict=True):
            axes.text(value + 0.012, y + 0.32, f"{value:.2f}", fontsize=9)
        axes.set_yticks(positions, list(names))
        axes.invert_yaxis()
        _percent_axis(axes, "x")
        axes.set_xlim(0, 1.12)
        axes.set_title("pass@1 with 95% CI", pad=6)
    return _svg(figure, "eval")
