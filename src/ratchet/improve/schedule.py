"""Which levers propose in a round, and each one's share of the round's false-accept budget.

Every candidate costs its proposal's time, the probe episodes the gate plays it on, and a share
of the round's false-accept budget (the gate splits alpha among a round's candidates). A lever
whose candidate lost probe points to the incumbent (the exemplars lever stacked on an adapter
trained without them lost 33 points on grid and all 24 probe tasks on an outside arithmetic
dataset) sits out the next round; one whose last two candidates both lost proposes no more in
the run. A round is never left without a candidate by one-round losses alone: when every
lever would sit out, those that lost only their last candidate propose after all (grid's rft,
down one probe task of 24 in round 2, left round 3 with no candidate while its search had found
level-2 successes). The reason is recorded in the round's candidates like a lever's own
"nothing to propose". Everything is read from the completed rounds' records, so a resumed run
decides alike.

A proposing lever's share of the round's alpha follows its record in the run (:func:`alpha_shares`):
the gate splits alpha among a round's candidates by weighted Holm, so a lever whose candidates
were accepted gets more of it than one whose were not. On calc (dev seed 1, round 2), rft's
candidate (p = 0.0107) missed the equal split's 0.0083 beside an exemplars candidate that lost
30 probe points, after rft had been accepted in round 1 and exemplars not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratchet.improve.levers.base import NoCandidate


class SitsOut(NoCandidate):
    """A lever that does not propose this round, and why (see the module)."""


def sits_out(rounds: Sequence[dict[str, Any]], lever: str) -> str | None:
    """Why ``lever`` proposes nothing in the round after ``rounds``; ``None`` if it proposes.

    Args:
        rounds: The records of the completed rounds, in order.
        lever: The lever's name.
    """
    lost = _losses(rounds, lever)
    if len(lost) >= 2:
        points = ", ".join(f"{100 * c['probe_gain']:+.0f}" for _, c in reversed(lost))
        return (
            f"sits out the rest of the run: its last {len(lost)} candidates lost probe points "
            f"({points})"
        )
    if lost and rounds and lost[0][0] == rounds[-1]["round"]:
        candidate = lost[0][1]
        return (
            f"sits out this round: its last candidate ({candidate['version']}) lost "
            f"{-100 * candidate['probe_gain']:.0f} probe points"
        )
    return None


def sitting_out(rounds: Sequence[dict[str, Any]], levers: Sequence[str]) -> dict[str, str | None]:
    """Why each of ``levers`` proposes nothing in the next round (``None``: it proposes).

    As :func:`sits_out` for each lever, except that when every lever would sit out, the ones
    out for this round only propose: a round with no candidate learns nothing from its practice.
    """
    reasons = {lever: sits_out(rounds, lever) for lever in levers}
    if levers and all(reason is not None for reason in reasons.values()):
        reasons = {
            lever: reason if len(_losses(rounds, lever)) >= 2 else None
            for lever, reason in reasons.items()
        }
    return reasons


def _proposed(rounds: Sequence[dict[str, Any]], lever: str) -> list[tuple[int, dict[str, Any]]]:
    """``lever``'s gated candidates in ``rounds`` (not its rounds out or with nothing), by round."""
    return [
        (record["round"], candidate)
        for record in rounds
        for candidate in record.get("candidates", [])
        if candidate["lever"] == lever and candidate.get("version") is not None
    ]


def _losses(rounds: Sequence[dict[str, Any]], lever: str) -> list[tuple[int, dict[str, Any]]]:
    """``lever``'s latest run of candidates that lost probe points, newest first, by round."""
    lost: list[tuple[int, dict[str, Any]]] = []
    for number, candidate in reversed(_proposed(rounds, lever)):
        if candidate.get("probe_gain", 0.0) >= 0:
            break
        lost.append((number, candidate))
    return lost


def alpha_shares(rounds: Sequence[dict[str, Any]], levers: Sequence[str]) -> dict[str, float]:
    """Each lever's weight in the gate's split of the next round's alpha (see the module).

    A lever that had ``accepted`` of its ``proposed`` candidates accepted in ``rounds`` weighs
    ``(accepted + 1) / (proposed + 2)`` (the rule of succession): equal before any record, 2/3
    against 1/3 after one round that accepted one lever's candidate and not the other's.
    Weights fixed before the round's probe is played keep Holm's bound.

    Args:
        rounds: The records of the completed rounds, in order.
        levers: The levers' names.
    """
    shares = {}
    for lever in levers:
        accepted = [bool(candidate.get("accepted")) for _, candidate in _proposed(rounds, lever)]
        shares[lever] = (sum(accepted) + 1) / (len(accepted) + 2)
    return shares
