"""The report of an improvement run: how much better the agent got, how, and at what cost.

Read top to bottom: a one-sentence headline, the numbers behind it, the learning curve, which
lever produced which gain, every gate decision, where on the test split the gain landed (task
families, difficulties, individual flipped tasks), and the cost.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import ratchet.report.charts as charts
from ratchet.core.stats import paired_differences, permutation_p_value
from ratchet.report.data import (
    Attribution,
    ImproveRun,
    Stored,
    attribution,
    curve,
    flips,
    lever_gains,
)
from ratchet.report.html import (
    card,
    count,
    duration,
    esc,
    figure,
    p_value,
    page,
    rate,
    signed_points,
    table,
)
from ratchet.report.improve_rounds import cost_section, gate_section
from ratchet.report.improve_tasks import breakdown_section, episodes_section, flip_section
from ratchet.report.privileged import headline_suffix, privileged_note


def linked_trajectories(data: ImproveRun) -> list[Stored]:
    """The episodes the report links to: the base and final agents' test episodes."""
    final = data.test.get(data.final_version, []) if data.final_version != "base" else []
    return [*data.test.get("base", []), *final]


def headline(data: ImproveRun) -> str:
    """Return the one-sentence result, e.g. ``calc: pass@1 0.12 → 0.57 (+45 points) on ...``."""
    base, final = data.base["pass@1"], data.final["pass@1"]
    points = round((final - base) * 100)
    samples = f" ({data.k} samples each)" if data.k > 1 else ""
    steps = attribution(data)
    if steps:
        accepted = "accepted: " + ", ".join(f"{s.version} ({s.lever})" for s in steps)
    else:
        accepted = "no candidate passed the gate, so the base agent stays"
    return (
        f"{data.summary['env']}: pass@1 {base:.2f} → {final:.2f} ({points:+d} points) on "
        f"{data.base['n']} held-out test tasks{samples}; {accepted}{headline_suffix(data)}"
    )


def improve_page(data: ImproveRun) -> str:
    """Return the whole report page of an improvement run."""
    summary = data.summary
    base_runs = data.test.get("base", [])
    final_runs = data.test.get(data.final_version, [])
    steps = attribution(data)
    config = summary.get("config", {})
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(data.root.stat().st_mtime))
    levers = ", ".join(summary.get("levers", [])) or "none"
    sections = [
        f'<header class="top"><div class="eyebrow">Ratchet improvement report · run '
        f"{esc(summary['run_id'])} · {esc(created)}</div>"
        f"<h1>{esc(headline(data))}</h1>"
        f'<p class="lede">Model <b>{esc(summary.get("model", "?"))}</b>, levers {esc(levers)},'
        f" {len(summary['rounds'])} rounds. Every number below is measured on held-out test"
        " tasks that no decision ever saw, unless it says <i>probe</i>.</p></header>",
        privileged_note(data),
        _accepted_note(summary),
        _cards(data, base_runs, final_runs),
        figure(
            charts.headline_chart(data.base, data.final, f"final ({data.final_version})"),
            "Base and final agent on the same test tasks. The black whisker is the 95% "
            "interval of pass@1 (Wilson for one sample per task, a task-clustered bootstrap for "
            "several).",
        ),
        _curve_section(data),
        _attribution_section(data, steps),
        gate_section(summary),
        _exploration_section(summary),
        breakdown_section(data, base_runs, final_runs),
        flip_section(flips(base_runs, final_runs), data.final_version),
        cost_section(summary),
        episodes_section(base_runs, final_runs, data.final_version),
        _glossary(config),
    ]
    return page(f"Ratchet report: {summary['env']}", "\n".join(sections))


def _accepted_note(summary: dict[str, Any]) -> str:
    """The red-team findings accepted knowingly for the env's verifier, if any."""
    accepted: dict[str, str] = summary.get("accepted_findings") or {}
    if not accepted:
        return ""
    items = "".join(f"<li>{esc(name)}: {esc(reason)}</li>" for name, reason in accepted.items())
    return (
        f'<p class="note"><b>The env\'s verifier has {len(accepted)} red-team finding(s) '
        "accepted knowingly</b> (an attack <code>ratchet check</code> showed it lets through); "
        f"passes may include answers that exploit them:</p><ul>{items}</ul>"
    )


def _cards(data: ImproveRun, base_runs: list[Stored], final_runs: list[Stored]) -> str:
    base, final = data.base, data.final
    k = data.k

    def ci(metrics: dict[str, Any]) -> str:
        low, high = metrics.get("ci95", (metrics["pass@1"], metrics["pass@1"]))
        return f"95% CI {low:.2f}-{high:.2f}"

    paired = _paired_p_value(base_runs, final_runs)
    significance = f"paired {p_value(paired)} over test tasks" if paired is not None else ""
    cards = [
        card("base pass@1", rate(base["pass@1"]), ci(base)),
        card(f"final pass@1 ({data.final_version})", rate(final["pass@1"]), ci(final)),
        card("change", signed_points(final["pass@1"] - base["pass@1"]), significance),
    ]
    if k > 1:
        cards.append(
            card(
                f"pass^{k} (all {k} samples pass)",
                f"{base['pass^k']:.2f} → {final['pass^k']:.2f}",
                "consistency",
            )
        )
    else:
        cards.append(
            card("mean score", f"{base['mean_score']:.2f} → {final['mean_score']:.2f}", "0 to 1")
        )
    cards.append(
        card(
            "cost",
            duration(float(data.summary.get("seconds", 0.0))),
            f"{count(data.summary.get('tokens', 0))} tokens, "
            f"{count(data.summary.get('rollouts', 0))} episodes",
        )
    )
    return f'<div class="cards">{"".join(cards)}</div>'


def _paired_p_value(base_runs: list[Stored], final_runs: list[Stored]) -> float | None:
    """One-sided paired sign-flip p-value that final beats base on the test tasks."""
    before = {(t.task.id, t.sample): t.passed for _, t in base_runs}
    after = {(t.task.id, t.sample): t.passed for _, t in final_runs}
    shared = before.keys() & after.keys()
    if not shared:
        return None
    differences = paired_differences(
        {key: before[key] for key in shared}, {key: after[key] for key in shared}
    )
    return permutation_p_value(list(differences.values()), resamples=20_000)


def _curve_section(data: ImproveRun) -> str:
    points = curve(data)
    rows = [
        [
            str(p.round),
            esc(p.version),
            esc(p.accepted) if p.accepted else '<span class="flat">—</span>',
            rate(p.probe) if p.probe is not None else "—",
            rate(p.test) if p.test is not None else "—",
            count(p.tokens),
            duration(p.seconds),
        ]
        for p in points
    ]
    return (
        "<h2>Learning curve</h2>"
        '<p class="note">The incumbent after each round (round 0 is the base agent). The probe '
        "split is what the gate decides on; the test split is held out and only reported. "
        "Dotted green lines mark rounds where a new version was accepted.</p>"
        + figure(charts.curve_chart(points), "pass@1 per round against cost so far.")
        + "<details><summary>Curve data</summary>"
        + table(
            ["round", "incumbent", "new by", "probe pass@1", "test pass@1", "tokens", "time"],
            rows,
            numeric=(0, 3, 4, 5, 6),
        )
        + "</details>"
    )


def _attribution_section(data: ImproveRun, steps: list[Attribution]) -> str:
    rows = [
        [esc(g.lever), str(g.proposed), str(g.accepted), signed_points(g.probe_gain), test]
        for g in lever_gains(data, steps)
        for test in ["—" if g.test_gain is None else signed_points(g.test_gain)]
    ]
    headers = ["lever", "candidates", "accepted", "probe gain", "test gain"]
    parts = ["<h2>Which lever did it</h2>", table(headers, rows, numeric=(1, 2, 3, 4))]
    if not steps:
        parts.append(
            '<p class="note">No candidate was accepted: the final agent is the base agent. '
            "The gate table below says why each candidate was rejected.</p>"
        )
        return "".join(parts)
    by_test = all(s.test_after is not None and s.test_before is not None for s in steps)
    basis = "its own test gain" if by_test else "its probe gain (not every step was tested)"
    parts.append(
        '<p class="note">Each accepted version on the final agent\'s lineage, what it changed, '
        f"and its share of the total gain, measured by {basis}.</p>"
    )
    if by_test:
        parts.append(
            figure(
                charts.attribution_chart(data.base["pass@1"], steps, data.final["pass@1"]),
                "From base to final, one bar per accepted version (green: gain, red: loss).",
            )
        )
    rows = []
    for step in steps:
        test = (
            f"{step.test_before:.2f} → {step.test_after:.2f}"
            if step.test_before is not None and step.test_after is not None
            else "—"
        )
        share = f"{step.share * 100:.0f}%" if step.share is not None else "—"
        rows.append(
            [
                f"<b>{esc(step.version)}</b>",
                str(step.round),
                esc(step.lever),
                esc(step.parent),
                esc(step.change),
                f"{step.probe_gain * 100:+.0f} pts",
                test,
                share,
            ]
        )
    parts.append(
        table(
            [
                "version",
                "round",
                "lever",
                "parent",
                "what changed",
                "probe gain",
                "test pass@1",
                "share of gain",
            ],
            rows,
            numeric=(1, 5, 6, 7),
        )
    )
    shares: dict[str, float] = defaultdict(float)
    for step in steps:
        shares[step.lever] += step.share or 0.0
    if any(step.share is not None for step in steps):
        levers = ", ".join(
            f"<b>{esc(lever)}</b> {share * 100:.0f}%" for lever, share in shares.items()
        )
        parts.append(f"<p>By lever: {levers} of the gain.</p>")
    return "".join(parts)


def _exploration_section(summary: dict[str, Any]) -> str:
    """What each round's search did: tasks searched and solved, each strategy's yield."""
    rows = []
    for record in summary["rounds"]:
        explored = record.get("exploration") or {}
        roots = explored.get("roots", [0, 0])
        for name, levels in (explored.get("strategies") or {"-": {}}).items():
            for level, counts in (levels or {"-": [0, 0, 0]}).items():
                # Records made before relabelled branches were counted hold three numbers.
                branches, passed, tokens, relabelled = [*counts, 0][:4]
                rows.append(
                    [
                        str(record["round"]),
                        f"{roots[0]} / {roots[1]}",
                        f"{explored.get('solved', 0)} / {explored.get('searched', 0)}",
                        esc(name),
                        esc(level),
                        f"{passed} / {branches}",
                        str(relabelled),
                        count(tokens),
                    ]
                )
    if not rows:
        return ""
    return (
        "<h2>Exploration</h2>"
        '<p class="note">Each round plays every training task as the agent is (the roots), then '
        "searches the tasks no root solved: branches replay a state an episode reached and take "
        "an action not tried there, under a proposal strategy the scheduler picks by its "
        "verified successes per generated token so far. Relabelled: failed branches hindsight "
        "turned into a verified success at their level (recorded, not ranked by).</p>"
        + table(
            [
                "round",
                "roots passed",
                "searched tasks solved",
                "strategy",
                "level",
                "branches passed",
                "relabelled",
                "tokens generated",
            ],
            rows,
            numeric=(1, 2, 5, 6, 7),
        )
    )


def _glossary(config: dict[str, Any]) -> str:
    settings = ", ".join(f"{esc(k)}={esc(v)}" for k, v in sorted(config.items()))
    return (
        "<footer><p><b>How to read this.</b> <i>pass@1</i> is the share of episodes the "
        "verifier passed (it checks the state the agent left, not its claims). The <i>probe</i> "
        "split gives the gate its tasks to accept or reject candidates, fresh ones each round; "
        "the "
        "<i>test</i> split is held out and never used for a decision. A <i>lever</i> proposes a "
        "candidate agent (demonstrations, insight rules, fine-tuned weights); the <i>gate</i> "
        "keeps it only if it is significantly better on the probe without too many "
        f"regressions.</p><p>Settings: {settings}</p></footer>"
    )
