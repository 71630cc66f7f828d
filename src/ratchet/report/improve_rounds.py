"""The improvement report's round-level sections: every gate decision, and what it all cost.

Both read the run's ``summary.json``: each round's candidates with their probe numbers and the
gate's verdict, and each round's episodes, tokens and wall time.
"""

from __future__ import annotations

from typing import Any

from ratchet.report.html import badge, count, duration, esc, table


def _flips(candidate: dict[str, Any]) -> str:
    """Pass->fail flips against the limit, with the retest's confirmed count if one was played."""
    confirmed = candidate.get("confirmed_flips")
    flips = str(candidate["flips_pass_to_fail"])
    if confirmed is not None:
        flips += f" ({confirmed} confirmed)"
    return f"{flips} / {candidate.get('flip_limit', '?')}"


def _by_group(candidate: dict[str, Any]) -> str:
    """The probe per env and level (a suite) or per level, flips against each guarded budget."""
    parts = []
    for group in candidate.get("groups", ()):
        flips = group["flips_pass_to_fail"]
        if group.get("confirmed_flips") is not None:
            flips = f"{flips} ({group['confirmed_flips']} confirmed)"
        budget = f", flips {flips} / {group['flip_limit']}" if group["guarded"] else ""
        parts.append(
            f"{esc(group['group'])} {group['incumbent_pass']:.2f} → "
            f"{group['candidate_pass']:.2f}{budget}"
        )
    return f'<br><span class="note">{"; ".join(parts)}</span>' if parts else ""


def gate_section(summary: dict[str, Any]) -> str:
    """Return every candidate of every round: its probe numbers and the gate's decision."""
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
                    f"{candidate['incumbent_pass']:.2f} → {candidate['candidate_pass']:.2f}"
                    + _by_group(candidate),
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
        f'<p class="note">Each candidate played the same probe tasks ({_probe_sizes(summary)}) '
        "with the same seeds as the incumbent. Accepted only if the paired gain is "
        "significant (one-sided sign-flip permutation test, at its share of the run's alpha "
        f"{gate.get('alpha', 0.05)}, split over rounds and, by Holm weighted with each "
        f"lever's accepted candidates so far, over levers{_shares(summary)}) and its "
        f"pass→fail flips stay within the budget ({gate.get('flip_budget', 0.1):.0%} of the "
        f"probe episodes, at least one), within each env and each level of it too when the "
        f"probe holds several envs.{retest} Of several accepted candidates in a round, "
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


def _shares(summary: dict[str, Any]) -> str:
    """Each lever's share of a round's alpha, where they differ: ``: round 2 rft 0.67, ...``.

    Rounds record the levers' weights; a share is a weight over the round's total, as the log
    prints it.
    """
    parts = [
        f"round {record['round']} "
        + ", ".join(f"{esc(lever)} {w / sum(weights.values()):.2f}" for lever, w in weights.items())
        for record in summary["rounds"]
        if len(set((weights := record.get("alpha_shares", {})).values())) > 1
    ]
    return f": {'; '.join(parts)}" if parts else ""


def _probe_sizes(summary: dict[str, Any]) -> str:
    """The probe tasks of each round: ``24 a round``, or ``24, 24, 58`` where one grew."""
    least = summary.get("config", {}).get("probe_tasks", "")
    sizes = [record.get("probe_size", least) for record in summary["rounds"]]
    if all(size == least for size in sizes):
        return f"{least} a round"
    return (
        f"{', '.join(map(str, sizes))} in rounds 1-{len(sizes)}: more where the incumbent "
        "left too few failed tasks, by its earlier probes (none at a level just opened), for a "
        "candidate that solves part of them to show its gain"
    )


def cost_section(summary: dict[str, Any]) -> str:
    """Return each round's episodes, tokens and wall time, and the whole run's."""
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
            _phases(r.get("seconds_by_phase")),
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
            "",
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
                "of which",
            ],
            rows,
            numeric=(1, 2, 3, 4, 5),
        )
    )


def _phases(phases: dict[str, Any] | None) -> str:
    """A round's ``seconds_by_phase``: practice, each proposal, gate and test, or "-"."""
    if not phases:
        return "-"
    parts = [f"practice {duration(phases['practice'])}"]
    parts += [f"{lever} {duration(s)}" for lever, s in phases.get("proposals", {}).items()]
    parts.append(f"gate {duration(phases['gate'])}")
    if "test" in phases:
        parts.append(f"test {duration(phases['test'])}")
    return ", ".join(parts)
