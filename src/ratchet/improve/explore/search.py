"""A round's exploration: sample every task, then search the ones no sample solved.

Each training task is first played ``k`` times as the agent is (the roots: the agent's own
samples, at temperatures the frontier chose). A task none of whose samples passed is then
searched, one branch per wave: its tree (:mod:`.tree`) names the node to branch from, the
scheduler (:mod:`.bandit`) the strategy, and the branch (:mod:`.branch`) replays the node's
prefix, takes an action not tried there and plays on. Waves run every searched task's branch
at once, so a local model batches them, and stop for a task once it is solved or its budget of
branches or generated tokens is spent.

Where a replay does not meet the world its parent met, the env is not deterministic: that is
said once, and the remaining waves sample afresh instead of branching (still under the
scheduler's strategies). With ``explore`` off a round plays the roots alone.
"""

from __future__ import annotations

import functools
import random
import zlib
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.rollout import Steer
from ratchet.improve.explore.bandit import Yield, rank, tally
from ratchet.improve.explore.branch import Branch
from ratchet.improve.explore.strategies import STRATEGIES, Strategy, strategy_named
from ratchet.improve.explore.tree import Weights, choose, nodes, reach_of
from ratchet.improve.hindsight import EpisodeKey

PlayWave = Callable[[Sequence[Task], int, int, Steer, str], list[Trajectory]]
"""``play(tasks, k, first_sample, steer, label)``: play and store ``k`` steered samples a task."""


@dataclass(frozen=True)
class SearchConfig:
    """How training tasks are searched: the research knobs (the command line sets ``--explore``).

    Attributes:
        branches_per_task: Most branches a task no sample solved gets in a round.
        resamples: Samples of a branching action that repeats a tried one before it is made
            to call an untried tool.
        resample_heat: Temperature added to each resample.
        task_tokens: Most tokens a task's episodes of a round may generate before its search
            stops.
        strategies: The proposal strategies the scheduler chooses among (see
            :mod:`.strategies`).
        tree: How the node to branch from is chosen.
        temperature: The roots' sampling temperature; ``None``: chosen per task from the
            agent's success on it (see :func:`~ratchet.improve.frontier.explore_temperatures`).
    """

    branches_per_task: int = 6
    resamples: int = 3
    resample_heat: float = 0.3
    task_tokens: int = 4096
    strategies: tuple[str, ...] = tuple(s.name for s in STRATEGIES)
    tree: Weights = field(default_factory=Weights)
    temperature: float | None = None

    def __post_init__(self) -> None:
        """Refuse settings that cannot work.

        Raises:
            ValueError: If a count is negative, or a strategy name is unknown.
        """
        for name in ("branches_per_task", "resamples", "task_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"search {name} cannot be negative ({getattr(self, name)})")
        if not self.strategies:
            raise ValueError("search needs at least one strategy")
        for name in self.strategies:
            strategy_named(name)


@dataclass(frozen=True)
class Explored:
    """A round's training episodes and what the search did.

    Attributes:
        episodes: Every training episode of the round: the roots, then each wave's branches.
        record: JSON-ready: ``roots`` (``[passed, episodes]``), ``searched`` (tasks),
            ``solved`` (of those, by a branch), ``branches`` (played), ``strategies``
            (``{name: {level: [branches, passed, tokens, relabelled]}}`` this round; the
            last count is 0 until :meth:`with_relabels`), ``deterministic``.
    """

    episodes: list[Trajectory]
    record: dict[str, Any]

    def with_relabels(self, relabelled: Set[EpisodeKey]) -> Explored:
        """The same round, its record counting each strategy's branches in ``relabelled``.

        Args:
            relabelled: The episodes hindsight relabelled into a verified success at their
                level or above (see :func:`~ratchet.improve.hindsight.sources`).
        """
        strategies = _by_strategy(tally(self.episodes, relabelled))
        return replace(self, record={**self.record, "strategies": strategies})


def explore(
    tasks: Sequence[Task],
    k: int,
    first: int,
    temperatures: dict[str, list[float]],
    play: PlayWave,
    *,
    config: SearchConfig,
    search: bool,
    history: Sequence[Trajectory],
    max_turns: int,
    seed: int,
    shared: str = "",
    log: Callable[[str], None] = print,
) -> Explored:
    """Play a round's training tasks: ``k`` roots each, then search the unsolved ones.

    Args:
        tasks: The round's training tasks.
        k: Root samples per task, numbered from ``first``; wave ``w`` (from 0) plays sample
            ``first + k + w``.
        first: The round's first sample number.
        temperatures: Each task's root temperatures, by task id (``k`` each).
        play: Plays and stores steered samples (see :data:`PlayWave`).
        config: The search's settings.
        search: Whether to search at all (``--explore auto``) or play the roots alone.
        history: The run's training episodes before this round (the strategies' yields, the
            agent's reach, whether the env has shown itself not deterministic).
        max_turns: The episodes' turn budget.
        seed: Seeds the scheduler's draws.
        shared: Text every task of the env shows (its policy), which no strategy copies from.
        log: Where to say that the env is not deterministic.
    """
    strategies = [strategy_named(name) for name in config.strategies]

    def root(task: Task, sample: int) -> Branch:
        temperature = temperatures[task.id][sample - first]
        return Branch(
            temperature=temperature, instruction=task.instruction, draw=_draw(task, sample)
        )

    episodes: dict[str, list[Trajectory]] = {task.id: [] for task in tasks}
    episodes |= _grouped(play(tasks, k, first, root, "train"))
    deterministic = all(_matched(t) for t in history)
    yields = tally(history)
    reach = reach_of([t for t in [*history, *_flat(episodes)] if t.passed])
    searched: set[str] = set()
    waves = config.branches_per_task if search else 0
    for wave in range(waves):
        sample = first + k + wave
        branches: dict[str, Branch] = {}
        for task in tasks:
            own = episodes[task.id]
            if any(t.passed for t in own) or _spent(own) >= config.task_tokens:
                continue
            rng = random.Random(f"{seed}:{task.id}:{sample}")
            # A strategy that finds no node of its kind (nowhere to close) gives way to the next.
            for strategy in rank(strategies, task.difficulty, yields, rng):
                branch = _branch(task, sample, own, strategy, config, deterministic, reach,
                                 max_turns)  # fmt: skip
                if branch is not None:
                    branches[task.id] = replace(branch, shared=shared)
                    break
        if not branches:
            break
        searched |= set(branches)
        wave_tasks = [task for task in tasks if task.id in branches]
        steer = functools.partial(_steer, branches)
        played = play(wave_tasks, 1, sample, steer, f"train search {wave + 1}")
        for task_id, fresh in _grouped(played).items():
            episodes[task_id].extend(fresh)
        yields = _merged(yields, tally(played))
        if deterministic and not all(_matched(t) for t in played):
            deterministic = False
            log(
                "  a replayed prefix met another world than its parent's: the env is not "
                "deterministic, so exploration samples afresh instead of branching"
            )
    everything = _flat(episodes)
    return Explored(everything, _record(everything, first, k, searched, deterministic))


def _record(
    episodes: list[Trajectory], first: int, k: int, searched: set[str], deterministic: bool
) -> dict[str, Any]:
    """The round's exploration record: roots passed, tasks searched and solved, the split."""
    roots = [t for t in episodes if first <= t.sample < first + k]
    branched = [t for t in episodes if t.sample >= first + k]
    return {
        "roots": [sum(t.passed for t in roots), len(roots)],
        "searched": len(searched),
        "solved": len({t.task.id for t in branched if t.passed}),
        "branches": len(branched),
        "strategies": _by_strategy(tally(branched)),
        "deterministic": deterministic,
    }


def _branch(
    task: Task,
    sample: int,
    own: Sequence[Trajectory],
    strategy: Strategy,
    config: SearchConfig,
    deterministic: bool,
    reach: int,
    max_turns: int,
) -> Branch | None:
    """The branch ``task`` plays as ``sample``, or ``None`` when its tree has no open node."""
    temperatures = [t.exploration.temperature for t in own if t.exploration is not None]
    hottest = max((t for t in temperatures if t is not None), default=None)
    fresh = Branch(
        strategy=strategy,
        temperature=hottest,
        instruction=task.instruction,
        draw=_draw(task, sample),
        tries=config.resamples,
        heat=config.resample_heat,
    )
    if not deterministic:
        return fresh
    node = choose(nodes(own, max_turns), reach, config.tree, closing=strategy.closes)
    if node is None:
        return None
    return replace(
        fresh,
        replies=node.replies(),
        seen=node.seen(),
        tried=node.tried,
        answers=node.answers,
        parent=node.source.sample,
    )


def _steer(branches: dict[str, Branch], task: Task, sample: int) -> Branch:
    return branches[task.id]


def _draw(task: Task, sample: int) -> int:
    return zlib.crc32(f"{task.id}:{sample}".encode())


def _grouped(episodes: Sequence[Trajectory]) -> dict[str, list[Trajectory]]:
    found: dict[str, list[Trajectory]] = {}
    for episode in episodes:
        found.setdefault(episode.task.id, []).append(episode)
    return found


def _flat(episodes: dict[str, list[Trajectory]]) -> list[Trajectory]:
    return [episode for own in episodes.values() for episode in own]


def _matched(episode: Trajectory) -> bool:
    return episode.exploration is None or episode.exploration.replay_matched


def _spent(episodes: Sequence[Trajectory]) -> int:
    """Tokens a task's episodes generated, resamples included."""
    return sum(
        t.completion_tokens + (t.exploration.discarded_tokens if t.exploration else 0)
        for t in episodes
    )


def _merged(
    a: dict[tuple[str, int], Yield], b: dict[tuple[str, int], Yield]
) -> dict[tuple[str, int], Yield]:
    return {key: a.get(key, Yield()) + b.get(key, Yield()) for key in {*a, *b}}


def _by_strategy(yields: dict[tuple[str, int], Yield]) -> dict[str, dict[str, list[int]]]:
    found: dict[str, dict[str, list[int]]] = {}
    for (name, level), y in sorted(yields.items()):
        if y.branches:
            found.setdefault(name, {})[str(level)] = y.to_list()
    return found
