"""The gate's probe per env and per level, and the flip budget within each of those groups.

When the probe holds tasks of several envs (a suite, see :func:`ratchet.core.task.member_of`),
the gate's flip budget holds within each env and within each level of each env too, every group
tolerating one flip as the whole probe does: a gain on one env cannot pay for what the candidate
broke on another. :func:`probe_groups` splits the probe into those groups and
:func:`group_outcome` counts a candidate's flips in one of them (:class:`GroupOutcome`); a single
env's probe is split into its levels only to report them, and keeps the one budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ratchet.core.task import Task, member_of

Key = tuple[str, int]
"""A paired probe episode: ``(task id, sample)``."""

Group = tuple[str, frozenset[Key], bool]
"""A group of the probe: its name, its episodes and whether the flip budget holds in it."""


@dataclass(frozen=True)
class GroupOutcome:
    """One env's, or one level's, share of a candidate's paired probe episodes.

    Attributes:
        group: ``calc`` (an env of a suite), ``calc L2`` (a level of it) or ``L2`` (a level
            of a single env).
        episodes: Paired probe episodes in the group.
        incumbent_pass: Incumbent pass rate on them.
        candidate_pass: Candidate pass rate on them.
        flips_pass_to_fail: Those the incumbent passed and the candidate failed.
        flip_limit: The most pass->fail flips the budget allows in the group.
        guarded: Whether the budget holds here (the groups of a probe of several envs), or the
            group is only reported.
        confirmed_flips: Flips a retest confirmed (``None``: no retest was played).
    """

    group: str
    episodes: int
    incumbent_pass: float
    candidate_pass: float
    flips_pass_to_fail: int
    flip_limit: int
    guarded: bool
    confirmed_flips: int | None = None

    @property
    def over_budget(self) -> bool:
        """Whether the group's counted flips (confirmed ones after a retest) break its budget."""
        counted = self.flips_pass_to_fail if self.confirmed_flips is None else self.confirmed_flips
        return self.guarded and counted > self.flip_limit


def flip_limit(flip_budget: float, episodes: int) -> int:
    """The most pass->fail flips ``flip_budget`` allows among ``episodes``: always at least one.

    A single sampled failure is indistinguishable from noise, so one flip is always tolerated.
    """
    return max(1, int(flip_budget * episodes))


def pass_to_fail(
    before: Mapping[Key, bool], after: Mapping[Key, bool], keys: Iterable[Key]
) -> list[Key]:
    """The ``keys`` the incumbent passed (``before``) and the candidate failed (``after``)."""
    return [k for k in keys if before[k] and not after[k]]


def probe_groups(tasks: Mapping[str, Task], keys: Iterable[Key]) -> list[Group]:
    """The probe's groups, each env and each level of it, or each level of its one env.

    Those of a probe of several envs are guarded; a single env's levels are only reported, and
    a probe of one env at one level has no groups.

    Args:
        tasks: The probe's tasks by id.
        keys: The paired probe episodes.
    """
    cells: dict[tuple[str, int], set[Key]] = {}
    for key in keys:
        task = tasks[key[0]]
        cells.setdefault((member_of(task), task.difficulty), set()).add(key)
    envs = sorted({env for env, _ in cells})
    levels = sorted({level for _, level in cells})
    if len(envs) == 1:
        if len(levels) == 1:
            return []
        return [(f"L{level}", frozenset(cells[envs[0], level]), False) for level in levels]
    groups: list[Group] = []
    for env in envs:
        own = sorted(level for name, level in cells if name == env)
        groups.append((env, frozenset().union(*(cells[env, level] for level in own)), True))
        if len(own) > 1:
            groups += [(f"{env} L{level}", frozenset(cells[env, level]), True) for level in own]
    return groups


def group_outcome(
    group: Group,
    before: Mapping[Key, bool],
    after: Mapping[Key, bool],
    broken: set[str] | None,
    flip_budget: float,
) -> GroupOutcome:
    """A candidate's outcome in one group of the probe.

    Args:
        group: The group, from :func:`probe_groups`.
        before: The incumbent's probe outcomes.
        after: The candidate's outcomes on the same episodes.
        broken: The flipped tasks a retest confirmed (``None``: no retest was played).
        flip_budget: The gate's flip budget, a share of the group's episodes.
    """
    name, keys, guarded = group
    flips = pass_to_fail(before, after, keys)
    return GroupOutcome(
        group=name,
        episodes=len(keys),
        incumbent_pass=sum(before[k] for k in keys) / len(keys),
        candidate_pass=sum(after[k] for k in keys) / len(keys),
        flips_pass_to_fail=len(flips),
        flip_limit=flip_limit(flip_budget, len(keys)),
        guarded=guarded,
        confirmed_flips=None if broken is None else sum(task in broken for task, _ in flips),
    )
