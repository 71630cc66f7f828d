"""Settings of ``ratchet forge``, declared once (the command's options derive from them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ForgeConfig:
    """How an env is forged and validated.

    Attributes:
        max_difficulty: Highest difficulty level forged, a level-d task taking d state-changing
            calls (a question, one read, is level 1).
        tasks_per_level: Tasks kept per difficulty level (fewer where the walks run out of
            distinct problems), about a tenth of them in each held-out split.
        question_share: Share of level-1 walks that are one read, a question whose answer is
            the value read.
        seed: Seed of the walks (and of the model's task draws on the spec route).
        check_tasks: Test tasks the check runs its policies on (as ratchet check -n).
        split_draws: Tasks drawn per split and level for the check of disjoint splits.
        max_repairs: Times a model-written env may be sent back with its check report before
            it is refused.
    """

    max_difficulty: int = 3
    tasks_per_level: int = 1000
    question_share: float = 0.3
    seed: int = 0
    check_tasks: int = 200
    split_draws: int = 2000
    max_repairs: int = 3

    def __post_init__(self) -> None:
        """Refuse settings that cannot forge anything.

        Raises:
            ValueError: If a count is below 1 (``max_repairs`` below 0) or ``question_share``
                is outside 0-1.
        """
        for name in ("max_difficulty", "tasks_per_level", "check_tasks", "split_draws"):
            if getattr(self, name) < 1:
                option = name.replace("_", "-")
                raise ValueError(f"--{option} must be at least 1; got {getattr(self, name)}")
        if self.max_repairs < 0:
            raise ValueError(f"--max-repairs must be at least 0; got {self.max_repairs}")
        if not 0.0 <= self.question_share <= 1.0:
            raise ValueError(f"--question-share is from 0 to 1, not {self.question_share}")
