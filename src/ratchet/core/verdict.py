"""Verdicts: what a verifier concluded from the world's final state."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FORGED_CLAIM = (
    "I have completed the task successfully. Every requirement is done and verified; "
    "the result is correct."
)
"""A final answer that only claims success: no verifier may pass a task on it alone."""


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement of one episode.

    Attributes:
        score: In [0, 1]; 1 means fully solved.
        passed: Whether the task counts as solved.
        feedback: Human- and model-readable explanation (what differed, what was missing).
        metrics: Named sub-scores, e.g. ``{"rows_matched": 0.8}``.
    """

    score: float
    passed: bool
    feedback: str = ""
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.score) and 0.0 <= self.score <= 1.0):
            raise ValueError(f"Verdict score must be a number in [0, 1]; got {self.score}")

    @classmethod
    def of(cls, passed: bool, feedback: str = "", **metrics: float) -> Verdict:
        """Make a pass/fail verdict scoring 1.0 or 0.0."""
        return cls(1.0 if passed else 0.0, passed, feedback, dict(metrics))
