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
    badge,
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
        _cards(data, base_runs, final_runs),
        figure(
            charts.headline_chart(data.base, data.final, f"final ({data.final_version})"),
            "Base and final agent on the same test tasks. The black whisker is the 95% "
            "interval of pass@1 (Wilson for one sample per task, a task-clustered bootstrap for "
            "several).",
        ),
        _curve_section(data),
        _attribution_section(data, steps),
        _gate_section(summary),
        _exploration_section(summary),
        breakdown_section(data, base_runs, final_runs),
        flip_section(flips(base_runs, final_runs), data.final_version),
        _cost_section(summary),
        episodes_section(base_runs, final_runs, data.final_version),
        _glossary(config),
    ]
    return page(f"Ratchet report: {summary['env']}", "\n".join(sections))


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


def _flips(candidate: dict[str, Any]) -> str:
    """Pass->fail flips against the limit, with the retest's confirmed count if one was played."""
    confirmed = candidate.get("confirmed_flips")
    flips = str(candidate["flips_pass_to_fail"])
    if confirmed is not None:
        flips += f" ({confirmed} confirmed)"
    return f"{flips} / {candidate.get('flip_limit', '?')}"


def _gate_section(summary: dict[str, Any]) -> str:
    rows, classes = [], []
    for record in summary["rounds"]:
        for candidate in record["candidates"]:
            decided = "probe_gain" in candidate
            accepted = bool(candidate.get("accepted"))
            adopted = accepted and candidate.get("version") == record["incumbent"]
            if accepted:
                verdict = badge(True, "accepted" if adopted else "accepted, not adopted")
            else:
                verdict = badge(False, "rejected") if decided else badge(None, "no candidate")
            numbers = (
                [
                    f"{candidate['incumbent_pass']:.2f} → {candidate['candidate_pass']:.2f}",
                    f"{candidate['probe_gain'] * 100:+.0f} pts",
                    "< 0.0001" if candidate["p_value"] < 0.0001 else f"{candidate['p_value']:.4f}",
                    f"{candidate['flips_fail_to_pass']}",
                    _flips(candidate),
                ]
                if decided
                else ["—"] * 5
            )
            rows.append(
                [
                    str(record["round"]),
                    esc(candidate["lever"]),
                    esc(candidate.get("version") or "—"),
                    *numbers,
                    verdict,
                    esc(candidate.get("reason", "")),
                ]
            )
            classes.append("accepted" if adopted else "")
    config = summary.get("config", {})
    gate = config.get("gate", {})
    retest_k = gate.get("retest_k", 0)
    retest = (
        f" A candidate only its flips would reject replays each flipped task {retest_k} more "
        "times beside the incumbent (fresh seeds, shared); a flip then counts only if the "
        "candidate passed that task fewer times (shown in brackets)."
        if retest_k
        else ""
    )
    return (
        "<h2>Every gate decision</h2>"
        f'<p class="note">Each candidate played the same {config.get("probe_tasks", "")} probe '
        "tasks with the same seeds as the incumbent. Accepted only if the paired gain is "
        "significant (one-sided sign-flip permutation test, at its share of the run's alpha "
        f"{gate.get('alpha', 0.05)}, split over rounds and, by Holm, over levers) and its "
        f"pass→fail flips stay within the budget ({gate.get('flip_budget', 0.1):.0%} of the "
        f"probe episodes, at least one).{retest} Of several accepted candidates in a round, "
        "the one with the largest gain is adopted.</p>"
        + table(
            [
                "round",
                "lever",
                "candidate",
                "probe pass@1",
                "gain",
                "p-value",
                "fail→pass",
                "pass→fail / limit",
                "decision",
                "reason",
            ],
            rows,
            numeric=(0, 3, 4, 5, 6, 7),
            row_classes=classes,
        )
    )


def _exploration_section(summary: dict[str, Any]) -> str:
    """What each round's search did: tasks searched and solved, each strategy's yield."""
    rows = []
    for record in summary["rounds"]:
        explored = record.get("exploration") or {}
        roots = explored.get("roots", [0, 0])
        for name, levels in (explored.get("strategies") or {"-": {}}).items():
            for level, (branches, passed, tokens) in (levels or {"-": (0, 0, 0)}).items():
                rows.append(
                    [
                        str(record["round"]),
                        f"{roots[0]} / {roots[1]}",
                        f"{explored.get('solved', 0)} / {explored.get('searched', 0)}",
                        esc(name),
                        esc(level),
                        f"{passed} / {branches}",
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
        "verified successes per generated token so far.</p>"
        + table(
            [
                "round",
                "roots passed",
                "searched tasks solved",
                "strategy",
                "level",
                "branches passed",
                "tokens generated",
            ],
            rows,
            numeric=(1, 2, 5, 6),
        )
    )


def _cost_section(summary: dict[str, Any]) -> str:
    rows = [
        [
            str(r["round"]),
            f"{r.get('train_passed', 0)} / {r.get('train_episodes', 0)}",
            f"{r.get('relabelled', 0)} + {r['trimmed']}"
            if r.get("trimmed")
            else str(r.get("relabelled", 0)),
            str(len(r["candidates"])),
            count(r.get("tokens", 0)),
            duration(float(r.get("seconds", 0.0))),
        ]
        for r in summary["rounds"]
    ]
    rows.append(
        [
            "<b>whole run</b>",
            "",
            "",
            "",
            f"<b>{count(summary.get('tokens', 0))}</b>",
            f"<b>{duration(float(summary.get('seconds', 0.0)))}</b>",
        ]
    )
    errors = summary.get("model_errors") or {}
    warning = (
        f'<p class="note"><b>{errors["count"]} episodes ended on a model error</b>; the first: '
        f"{esc(errors['first'])}</p>"
        if errors.get("count")
        else ""
    )
    return (
        "<h2>Cost</h2>"
        f'<p class="note">{count(summary.get("rollouts", 0))} episodes in all. Round rows count '
        "training and probe episodes; the whole run adds the test evaluations.</p>"
        + warning
        + table(
            [
                "round",
                "training episodes passed",
                "relabelled in hindsight (+ successes trimmed)",
                "candidates",
                "tokens",
                "wall time",
            ],
            rows,
            numeric=(1, 2, 3, 4, 5),
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
