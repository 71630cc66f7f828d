"""Playing agents for an improvement run: exploration, probes and tests, each stored at once.

Every kind of episode has its own seed stream and sample numbers, so that candidates and the
incumbent meet the same probe tasks with the same seeds (the gate pairs them), each round's
exploration samples fresh, and nothing a test episode does can reach a decision.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.progress import Progress

from ratchet.core.agent import Agent
from ratchet.core.env import Env
from ratchet.core.task import Split, Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.cluster import RayPool
from ratchet.engine.metrics import Metrics, summarize
from ratchet.engine.models import Backends, Model, Trainer
from ratchet.engine.rollout import Exploration, Explore, rollout
from ratchet.improve.config import ImproveConfig
from ratchet.improve.frontier import SuccessRates, explore_temperatures
from ratchet.improve.gate import RETEST_FIRST_SAMPLE, Retest
from ratchet.improve.levers.base import Lever, LeverContext, make_play
from ratchet.improve.rundir import Propose, RunDir

PROBE_SEED = 1_000
TEST_SEED = 2_000
LEVER_SEED = 3_000


def draw(env: Env, split: Split, n: int, seed: int, max_difficulty: int) -> list[Task]:
    """Draw ``n`` tasks of ``split`` spread evenly over difficulties ``1..max_difficulty``."""
    top = min(max_difficulty, env.max_difficulty)
    per_level = [n // top + (1 if level < n % top else 0) for level in range(top)]
    return [
        task
        for level, count in enumerate(per_level, start=1)
        for task in env.tasks(split, count, seed=seed, difficulty=level)
    ]


def is_guided(index: int, share: float) -> bool:
    """Whether a task's training sample ``index`` (from 0) is one the explore options guide.

    Guided samples are spread evenly over the k samples at ``share`` of them: 0.5 guides the
    odd ones, 1.0 all, 0 none.
    """
    return math.floor((index + 1) * share) > math.floor(index * share)


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

    def explore(self, agent: Agent, tasks: Sequence[Task], number: int) -> list[Trajectory]:
        """Round ``number``'s training episodes, each exploring in its own way.

        With ``explore_temperature`` unset, each task's k samples get temperatures chosen from
        the agent's success on the task (or its family and difficulty) in earlier rounds (see
        :func:`~ratchet.improve.frontier.explore_temperatures`); the episodes of this round
        do not count, so a resumed round picks the same temperatures. With
        ``explore_past_finish``, the guided samples (``explore_guided_share`` of each task's,
        every second one by default) of a level-L task are offered ``finish`` only after L
        acting calls (to tools that take arguments; the built-in ladders add one step per
        level): an agent that learned to finish after one call on level 1 otherwise never
        tries the longer plans the next level needs, and leaves nothing to learn them from. With
        ``explore_first_tool``, those same samples open with a call to a tool drawn per
        episode (any but ``finish``), so actions the agent never picks first get tried too;
        with ``explore_last_tool``, every second of them makes its last call before ``finish``
        with a drawn tool, so a task's samples do not all end a plan the same wrong way;
        with ``explore_copy_arguments``, their free arguments are copied from the conversation,
        with ``explore_chain`` each call takes up one value of the result before it, and with
        ``explore_fresh_arguments`` no value is passed twice.
        With ``explore_skip_repeats``, no sample calls a tool without arguments twice in a row.
        """
        k, first = self.config.train_k, (number - 1) * self.config.train_k
        seed = self.config.seed + number
        fixed = self.config.explore_temperature
        earlier = [t for t in self.run.experience if t.sample < first]
        rates = SuccessRates.of_agent(earlier, agent.version)
        chosen = {
            task.id: [fixed] * k
            if fixed is not None
            else explore_temperatures(rates.task(task), k, agent.temperature)
            for task in tasks
        }

        def explore(task: Task, sample: int) -> Exploration:
            index, share = sample - first, self.config.explore_guided_share
            guided = is_guided(index, share)
            withheld = self.config.explore_past_finish and guided
            varied = self.config.explore_first_tool and guided
            # Every second guided sample: the others keep the agent's own last step.
            ended = self.config.explore_last_tool and guided and is_guided(index, share / 2)
            return Exploration(
                chosen[task.id][index],
                task.difficulty if withheld else 0,
                zlib.crc32(f"{task.id}:{sample}".encode()) if varied else None,
                zlib.crc32(f"{task.id}:{sample}:last".encode()) if ended else None,
                self.config.explore_copy_arguments and guided,
                self.config.explore_skip_repeats,
                self.config.explore_chain,
                self.config.explore_fresh_arguments,
            )

        return self.play(agent, tasks, k, seed, "train", first, explore)

    def probe_tasks(self, number: int, open_to: int) -> list[Task]:
        """Round ``number``'s probe: a fresh sample from the probe split.

        Args:
            number: The round.
            open_to: The curriculum's highest open level this round; the probe stays at or
                below it unless ``probe_all_levels`` is set.
        """
        seed = self.config.seed + PROBE_SEED + 7919 * number
        return draw(self.env, "probe", self.config.probe_tasks, seed, self.probe_top(open_to))

    def probe_top(self, open_to: int) -> int:
        """The highest level the probe covers when the curriculum is open to ``open_to``."""
        top = self.config.max_difficulty
        return top if self.config.probe_all_levels else min(open_to, top)

    def probe(self, agent: Agent, tasks: Sequence[Task]) -> list[Trajectory]:
        """``agent``'s episodes on probe tasks (same seeds for every agent: they pair up)."""
        seed = self.config.seed + PROBE_SEED
        return self.play(agent, tasks, self.config.probe_k, seed, f"probe {agent.version}")

    def retest(
        self, incumbent: Agent, candidate: Agent, probe: Sequence[Task], flipped: Sequence[str]
    ) -> Retest:
        """Both agents' retest episodes on the ``flipped`` probe tasks (paired, fresh seeds)."""
        wanted = set(flipped)
        tasks = [t for t in probe if t.id in wanted]
        seed, k = self.config.seed + PROBE_SEED, self.config.gate.retest_k
        before, after = (
            self.play(agent, tasks, k, seed, f"retest {agent.version}", RETEST_FIRST_SAMPLE)
            for agent in (incumbent, candidate)
        )
        return before, after

    def test_tasks(self) -> list[Task]:
        """The held-out test tasks."""
        seed = self.config.seed + TEST_SEED
        return draw(self.env, "test", self.config.test_tasks, seed, self.config.max_difficulty)

    def test(self, agent: Agent, tasks: Sequence[Task]) -> Metrics:
        """``agent``'s test metrics (recorded with the run; never used for a decision)."""
        seed = self.config.seed + TEST_SEED
        tick = time.perf_counter()
        played = self.play(agent, tasks, self.config.test_k, seed, f"test {agent.version}")
        metrics = summarize(played, self.config.test_k, wall_s=time.perf_counter() - tick)
        self.run.tested(agent.version, metrics.to_dict())
        return metrics

    def proposal(self, lever: Lever, incumbent: Agent, number: int) -> Propose:
        """``lever``'s proposal function for round ``number``, for :meth:`RunDir.candidate`."""

        def propose(workdir: Path, version: str) -> Agent | None:
            model = None if incumbent.scripted else self.model(incumbent)
            play = make_play(
                self.env,
                model,
                replace(self.config.rollout, budget=self.config.budget()),
                seed=self.config.seed + LEVER_SEED + 7919 * number,
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
                seed=self.config.seed + number,
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
        explore: Explore | None = None,
    ) -> list[Trajectory]:
        """Roll ``agent`` out on ``tasks`` (resuming), store every episode, return them all."""
        done = self.run.done(agent.version)
        config = replace(self.config.rollout, budget=self.config.budget())
        options: dict[str, Any] = {
            "k": k,
            "seed": seed,
            "first_sample": first,
            "skip": done,
            "on_trajectory": lambda t: self.run.record([t]),
            "progress": self.progress,
            "description": label,
            "explore": explore,
        }
        if self.pool is not None:
            directory = self.run.agent_dir(agent.version)
            fresh = self.pool.rollout(
                self.env, tasks, agent, config, agent_dir=directory, **options
            )
        else:
            model = None if agent.scripted else self.model(agent)
            fresh = rollout(self.env, tasks, agent, model, config, **options)
        wanted = {(t.id, s) for t in tasks for s in range(first, first + k)}
        if not done & wanted:
            return fresh
        return self.run.episodes(agent.version, tasks, range(first, first + k))
