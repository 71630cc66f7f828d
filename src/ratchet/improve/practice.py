"""Playing agents for an improvement run: exploration, probes and tests, each stored at once.

Every kind of episode has its own seed stream and sample numbers, so that candidates and the
incumbent meet the same probe tasks with the same seeds (the gate pairs them), each round's
exploration samples fresh, and nothing a test episode does can reach a decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rich.progress import Progress

from ratchet.core.agent import Agent
from ratchet.core.env import Env, policy_of
from ratchet.core.task import Split, Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.cluster import RayPool
from ratchet.engine.metrics import Metrics, summarize
from ratchet.engine.models import Backends, Model, Trainer
from ratchet.engine.request import RolloutRequest
from ratchet.engine.rollout import Steer
from ratchet.improve import seeds
from ratchet.improve.config import ImproveConfig
from ratchet.improve.explore import Explored, explore
from ratchet.improve.frontier import SuccessRates, explore_temperatures
from ratchet.improve.gate import RETEST_FIRST_SAMPLE, Retest
from ratchet.improve.levers.base import Lever, LeverContext, make_play
from ratchet.improve.rundir import Propose, RunDir
from ratchet.improve.schedule import SitsOut


def levels(env: Env, n: int, max_difficulty: int) -> list[tuple[int, int]]:
    """``(level, count)``: ``n`` tasks spread evenly over difficulties ``1..max_difficulty``."""
    top = min(max_difficulty, env.max_difficulty)
    return [(level, n // top + (1 if level <= n % top else 0)) for level in range(1, top + 1)]


def draw(env: Env, split: Split, n: int, seed: int, max_difficulty: int) -> list[Task]:
    """Draw ``n`` tasks of ``split`` spread evenly over difficulties ``1..max_difficulty``."""
    return [
        task
        for level, count in levels(env, n, max_difficulty)
        for task in env.tasks(split, count, seed=seed, difficulty=level)
    ]


@dataclass(frozen=True)
class Probe:
    """A round's probe tasks.

    Attributes:
        tasks: The tasks, level by level.
        reused: Ids of tasks an earlier round probed too (the split held too few problems).
    """

    tasks: list[Task]
    reused: tuple[str, ...] = ()


@dataclass
class Practice:
    """Plays agents of one run and stores every episode in its :class:`RunDir`.

    Attributes:
        run: The run directory.
        env: The env practised.
        backends: Builds each agent version's backend.
        reflector: The reflector model for levers that need one.
        trainer: Makes the adapter trainer for the run's model (``None`` if untrainable).
        progress: Progress display, or ``None``.
        pool: Ray env workers to play episodes on, or ``None`` to play them here.
    """

    run: RunDir
    env: Env
    backends: Backends
    reflector: Model | None = None
    trainer: Callable[[], Trainer | None] = lambda: None
    progress: Progress | None = None
    pool: RayPool | None = None

    @property
    def config(self) -> ImproveConfig:
        """The run's settings."""
        return self.run.config

    def explore(
        self, agent: Agent, tasks: Sequence[Task], number: int, log: Callable[[str], None] = print
    ) -> Explored:
        """Round ``number``'s training episodes: ``k`` samples a task, then search the unsolved.

        The roots' temperatures are ``search.temperature`` if set, else chosen per task from
        the agent's success on it (or its family and difficulty) in earlier rounds (see
        :func:`~ratchet.improve.frontier.explore_temperatures`). With ``explore`` on
        (``auto``), the tasks none of whose samples passed are searched by branching from the
        states their episodes reached (see :mod:`ratchet.improve.explore`).
        """
        config, search = self.config, self.config.search
        k = config.train_k
        first = (number - 1) * (k + search.branches_per_task)
        seed = seeds.practice(config.seed, number)
        mine = range(first, first + k + search.branches_per_task)
        history = [t for t in self.run.experience if t.sample not in mine]
        rates = SuccessRates.of_agent(history, agent.version)
        chosen = {
            task.id: [search.temperature] * k
            if search.temperature is not None
            else explore_temperatures(rates.task(task), k, agent.temperature)
            for task in tasks
        }

        def play(
            wave: Sequence[Task], samples: int, start: int, steer: Steer, label: str
        ) -> list[Trajectory]:
            return self.play(agent, wave, samples, seed, label, start, steer)

        return explore(
            tasks,
            k,
            first,
            chosen,
            play,
            config=search,
            search=config.explore == "auto",
            history=history,
            max_turns=config.budget().max_turns or 1,
            seed=seed,
            shared=policy_of(self.env),
            log=log,
        )

    def probe_tasks(self, number: int, open_to: int, size: int | None = None) -> Probe:
        """Round ``number``'s probe: tasks of the probe split no earlier round probed.

        Each level's tasks come in order from one draw of the probe split for the whole run,
        so round ``r`` takes the next ones after those of rounds ``1..r-1`` (recomputed from
        their records, so a resumed round draws the same). Where the split holds too few
        problems for that, the round reuses earlier rounds' tasks, and the probe says which.

        Args:
            number: The round.
            open_to: The curriculum's highest open level this round; the probe stays at or
                below it unless ``probe_all_levels`` is set.
            size: Tasks to draw (default ``probe_tasks``; see
                :func:`~ratchet.improve.gate.probe_size`).
        """
        least = self.config.probe_tasks
        earlier = [
            (r["curriculum"]["probe_to"], r.get("probe_size", least))
            for r in self.run.rounds[: number - 1]
        ]
        used: dict[int, list[Task]] = {}
        probe = Probe([])
        for top, count in [*earlier, (self.probe_top(open_to), size or least)]:
            probe = self._fresh_probe(top, count, used)
            for task in probe.tasks:
                used.setdefault(task.difficulty, []).append(task)
        return probe

    def _fresh_probe(self, top: int, size: int, used: dict[int, list[Task]]) -> Probe:
        """``size`` tasks up to level ``top``, avoiding ``used`` ones where the split can."""
        seed = seeds.probe(self.config.seed)
        tasks: list[Task] = []
        reused: list[str] = []
        for level, count in levels(self.env, size, top):
            before = {task.id for task in used.get(level, [])}
            pool = self._largest_draw(level, count, count + len(before), seed)
            fresh = [task for task in pool if task.id not in before][:count]
            again = [task for task in pool if task.id in before][: count - len(fresh)]
            tasks += fresh + again
            reused += [task.id for task in again]
        return Probe(tasks, tuple(reused))

    def _largest_draw(self, level: int, least: int, most: int, seed: int) -> list[Task]:
        """The longest draw of ``least`` to ``most`` probe tasks at ``level`` the split holds.

        Draws are prefixes of one another (same seed), so the longest is found by bisection.
        """
        try:
            return self.env.tasks("probe", most, seed=seed, difficulty=level)
        except ValueError:  # the split has fewer problems at this level than asked
            pass
        best = self.env.tasks("probe", least, seed=seed, difficulty=level)
        low, high = least, most - 1
        while low < high:
            size = (low + high + 1) // 2
            try:
                best, low = self.env.tasks("probe", size, seed=seed, difficulty=level), size
            except ValueError:
                high = size - 1
        return best

    def probe_top(self, open_to: int) -> int:
        """The highest level the probe covers when the curriculum is open to ``open_to``."""
        top = self.config.max_difficulty
        return top if self.config.probe_all_levels else min(open_to, top)

    def probe(self, agent: Agent, tasks: Sequence[Task]) -> list[Trajectory]:
        """``agent``'s episodes on probe tasks (same seeds for every agent: they pair up)."""
        seed = seeds.probe(self.config.seed)
        return self.play(agent, tasks, self.config.probe_k, seed, f"probe {agent.version}")

    def retest(
        self, incumbent: Agent, candidate: Agent, probe: Sequence[Task], flipped: Sequence[str]
    ) -> Retest:
        """Both agents' retest episodes on the ``flipped`` probe tasks (paired, fresh seeds)."""
        wanted = set(flipped)
        tasks = [t for t in probe if t.id in wanted]
        seed, k = seeds.probe(self.config.seed), self.config.gate.retest_k
        before, after = (
            self.play(agent, tasks, k, seed, f"retest {agent.version}", RETEST_FIRST_SAMPLE)
            for agent in (incumbent, candidate)
        )
        return before, after

    def test_tasks(self) -> list[Task]:
        """The held-out test tasks."""
        seed = seeds.test(self.config.seed)
        return draw(self.env, "test", self.config.test_tasks, seed, self.config.max_difficulty)

    def test(self, agent: Agent, tasks: Sequence[Task]) -> Metrics:
        """``agent``'s test metrics (recorded with the run; never used for a decision)."""
        seed = seeds.test(self.config.seed)
        tick = time.perf_counter()
        played = self.play(agent, tasks, self.config.test_k, seed, f"test {agent.version}")
        metrics = summarize(played, self.config.test_k, wall_s=time.perf_counter() - tick)
        self.run.tested(agent.version, metrics.to_dict())
        return metrics

    def proposal(
        self, lever: Lever, incumbent: Agent, number: int, sitting_out: str | None = None
    ) -> Propose:
        """``lever``'s proposal function for round ``number``, for :meth:`RunDir.candidate`.

        With ``sitting_out`` (why the lever does not propose this round, see
        :mod:`ratchet.improve.schedule`), the function proposes nothing and says so.
        """

        def propose(workdir: Path, version: str) -> Agent | None:
            if sitting_out is not None:
                raise SitsOut(sitting_out)
            model = None if incumbent.scripted else self.model(incumbent)
            play = make_play(
                self.env,
                model,
                replace(self.config.rollout, budget=self.config.budget()),
                seed=seeds.lever_play(self.config.seed, number),
                record=self.run.record,
                progress=self.progress,
                label=lever.name,
            )
            context = LeverContext(
                env=self.env,
                incumbent=incumbent,
                experience=tuple(self.run.experience),
                model=model,
                reflector=self.reflector,
                trainer=self.trainer(),
                workdir=workdir,
                version=version,
                seed=seeds.practice(self.config.seed, number),
                progress=self.progress,
                incumbent_dir=self.run.agent_dir(incumbent.version),
                play=None if model is None else play,
                offer_tasks=lambda tasks, rejected: self.run.offer_tasks(
                    number, lever.name, tasks, rejected
                ),
            )
            return lever.propose(context)

        return propose

    def model(self, agent: Agent) -> Model:
        """``agent``'s backend."""
        return self.backends(agent, self.run.agent_dir(agent.version))

    def play(
        self,
        agent: Agent,
        tasks: Sequence[Task],
        k: int,
        seed: int,
        label: str,
        first: int = 0,
        steer: Steer | None = None,
    ) -> list[Trajectory]:
        """Roll ``agent`` out on ``tasks`` (resuming), store every episode, return them all."""
        done = self.run.done(agent.version)
        config = replace(self.config.rollout, budget=self.config.budget())
        request = RolloutRequest(
            self.env,
            tasks,
            agent,
            config,
            agent_dir=self.run.agent_dir(agent.version),
            k=k,
            seed=seed,
            first_sample=first,
            skip=done,
            on_trajectory=lambda t: self.run.record([t]),
            progress=self.progress,
            description=label,
            steer=steer,
        )
        if self.pool is not None:
            fresh = self.pool.rollout(request)
        else:
            fresh = request.play(None if agent.scripted else self.model(agent))
        wanted = {(t.id, s) for t in tasks for s in range(first, first + k)}
        if not done & wanted:
            return fresh
        return self.run.episodes(agent.version, tasks, range(first, first + k))
