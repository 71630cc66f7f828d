"""How a report shows gains that came from outside demonstrations (the ``demos`` lever).

A version that learned from demonstrations of another source (the env's oracle, a teacher
model, imported episodes) is marked ``privileged`` in ``summary.json``; its gain is not
self-improvement, so the report says so at the top and splits the lineage's test gain into
the steps that were self-improvement and the ones that were not.
"""

from __future__ import annotations

from ratchet.report.data import ImproveRun, attribution
from ratchet.report.html import esc


def privileged_versions(data: ImproveRun) -> dict[str, str]:
    """The privileged versions on the final agent's lineage, each with its source."""
    marks = data.summary.get("privileged") or {}
    return {version: str(mark.get("source", "?")) for version, mark in marks.items()}


def headline_suffix(data: ImproveRun) -> str:
    """Words to add to the headline when the final agent learned from demonstrations."""
    if not privileged_versions(data):
        return ""
    return " (privileged: learned from outside demonstrations, not self-improvement)"


def privileged_note(data: ImproveRun) -> str:
    """A warning paragraph with the self-improvement and privileged shares of the test gain."""
    marks = privileged_versions(data)
    if not marks:
        return ""
    named = ", ".join(f"{esc(v)} (demos from {esc(source)})" for v, source in marks.items())
    gains = {"self-improvement": 0.0, "privileged": 0.0}
    measured = True
    for step in attribution(data):
        if step.test_before is None or step.test_after is None:
            measured = False
            continue
        kind = "privileged" if step.version in marks else "self-improvement"
        gains[kind] += step.test_after - step.test_before
    split = (
        f" Test pass@1 gained by the privileged steps: {gains['privileged'] * 100:+.0f} points;"
        f" by the other steps: {gains['self-improvement'] * 100:+.0f} points (a step after a"
        " privileged one learned from that agent's experience, so it builds on it)."
        if measured
        else " Not every step was tested, so the gain cannot be split (run with --curve)."
    )
    return (
        '<p class="note"><span class="badge warn">privileged</span> '
        f"{named} learned from demonstrations of another source, so the change from base to "
        f"final is not self-improvement.{split}</p>"
    )
