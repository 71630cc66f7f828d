"""Rollouts on a Ray cluster: episodes in Ray actors, the store on the driver.

:class:`RayPool` starts ``workers`` actors, each loading the env by its reference (a registered
name, ``module:attr`` or ``file.py:attr``, importable on every node) and running up to
``episodes_per_worker`` episodes at once on threads. Env workers are sized here; generation
goes to the model servers the actors call (``--model openai:NAME --base-url ...``), sized by the
servers and their in-flight bound. Finished trajectories stream back to the driver as they
finish and are handed to ``on_trajectory`` in task order, exactly as
:func:`ratchet.engine.rollout.rollout` does, so the driver alone writes the store.

A worker that dies (its process killed, its node lost) takes only episodes that had not
finished: each is submitted again to a live worker and a replacement worker is started, so every
episode is stored exactly once. An episode that has lost its worker
:data:`MAX_ATTEMPTS` times is stored as crashed rather than retried for ever.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.env import Env
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import crashed
from ratchet.engine.models import Model, make_model
from ratchet.engine.request import RolloutRequest
from ratchet.engine.rollout import (
    RolloutConfig,
    Steering,
    collect,
    episode_jobs,
    player,
)

MAX_ATTEMPTS = 3


class EpisodeWorker:
    """The body of one Ray actor: an env and cached model backends that play episodes.

    Args:
        env_ref: The env's reference, loaded in the actor's own process.
        model_options: Options for building backends (e.g. ``base_url``).
    """

    def __init__(self, env_ref: str, model_options: dict[str, Any]) -> None:
        from ratchet.envs.registry import load_env_reference

        self.env = load_env_reference(env_ref)
        self.model_options = dict(model_options)
        self._models: dict[tuple[str, str | None], Model] = {}

    def play(
        self,
        agent: Agent,
        agent_dir: str | None,
        config: RolloutConfig,
        seed: int,
        task: Task,
        sample: int,
        steering: Steering | None = None,
    ) -> Trajectory:
        """Play one episode (steered by ``steering``, if given); return it."""
        model = None if agent.scripted else self._model(agent, agent_dir)
        steer = None if steering is None else (lambda task, sample: steering)
        return player(self.env, agent, model, config, seed, steer=steer)(task, sample)

    def pid(self) -> int:
        """The worker's process id (for tests that kill one)."""
        return os.getpid()

    def _model(self, agent: Agent, agent_dir: str | None) -> Model:
        adapter = agent.adapter_path(Path(agent_dir) if agent_dir else None)
        key = (agent.model, None if adapter is None else str(adapter))
        if key not in self._models:
            options = dict(self.model_options)
            if adapter is not None:
                options["adapter"] = str(adapter)
            self._models[key] = make_model(agent.model, **options)
        return self._models[key]


@dataclass(frozen=True)
class RayConfig:
    """Where and how wide episodes run on Ray.

    Attributes:
        address: ``local`` starts a private Ray instance here, whatever ``RAY_ADDRESS`` or a
            ``ray start`` on this machine say; ``auto`` joins the cluster ``RAY_ADDRESS`` names
            or the last ``ray start`` here; ``HOST:PORT`` or ``ray://HOST:10001`` joins that
            one; ``None`` is Ray's own default: ``auto`` if it finds a cluster, else ``local``.
        workers: Env worker actors.
        episodes_per_worker: Episodes one worker plays at once (threads in its process).
        num_cpus: CPUs of an instance started here (``None``: all).
    """

    address: str | None = None
    workers: int = 2
    episodes_per_worker: int = 8
    num_cpus: int | None = None


class RayPool:
    """Env workers on Ray, reused across rollouts; use as a context manager.

    Args:
        env_ref: The env's reference (loadable on every node).
        model_options: Options the workers build backends with (e.g. ``base_url``).
        config: Cluster address and sizes.

    Raises:
        ImportError: If ``ray`` is not installed (the ``ray`` extra).
    """

    def __init__(
        self, env_ref: str, model_options: dict[str, Any], config: RayConfig | None = None
    ) -> None:
        import ray

        self.ray = ray
        self.env_ref = env_ref
        self.model_options = dict(model_options)
        self.config = config or RayConfig()
        self.deaths = 0
        self._actor = ray.remote(EpisodeWorker)
        self._started_ray = False
        self.workers: list[Any] = []

    def __enter__(self) -> RayPool:
        if not self.ray.is_initialized():
            self.ray.init(
                address=self.config.address,
                num_cpus=self.config.num_cpus if self.config.address in (None, "local") else None,
                include_dashboard=False,
                log_to_driver=False,
            )
            self._started_ray = True
        self.workers = [self._start() for _ in range(self.config.workers)]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for worker in self.workers:
            self.ray.kill(worker)
        self.workers = []
        if self._started_ray:
            self.ray.shutdown()

    def _start(self) -> Any:
        concurrency = max(1, self.config.episodes_per_worker)
        return self._actor.options(max_concurrency=concurrency).remote(
            self.env_ref, self.model_options
        )

    def rollout(self, request: RolloutRequest) -> list[Trajectory]:
        """Play ``request`` on the workers and return the trajectories in task order.

        The workers build the model (from the agent's ``model``, the adapter in the request's
        ``agent_dir`` and the pool's model options), the request's ``config.concurrency``
        gives way to the pool's sizes, and its ``env`` is only used to record an episode that
        kept losing its worker.

        Raises:
            ModelError: If every episode ended on a model error.
        """
        config = request.config or RolloutConfig()
        jobs = episode_jobs(request.tasks, request.k, request.first_sample, request.skip)
        directory = None if request.agent_dir is None else str(request.agent_dir)
        steer = request.steer
        steerings = [None if steer is None else steer(t, s) for t, s in jobs]
        play = (request.agent, directory, config, request.seed)
        finished = self._stream(request.env, jobs, steerings, play)
        return collect(
            finished, len(jobs), request.on_trajectory, request.progress, request.description
        )

    def _stream(
        self,
        env: Env,
        jobs: list[tuple[Task, int]],
        steerings: list[Steering | None],
        play: tuple[Agent, str | None, RolloutConfig, int],
    ) -> Iterator[tuple[int, Trajectory]]:
        """Yield ``(job index, trajectory)`` as episodes finish, retrying those of dead workers."""
        pending = deque(range(len(jobs)))
        attempts = [0] * len(jobs)
        running: dict[Any, tuple[int, Any]] = {}
        try:
            while pending or running:
                self._submit(jobs, steerings, pending, attempts, running, play)
                ready, _ = self.ray.wait(list(running), num_returns=1)
                index, worker = running.pop(ready[0])
                try:
                    trajectory = self.ray.get(ready[0])
                except self.ray.exceptions.RayActorError as exc:
                    self._replace(worker)
                    if attempts[index] < MAX_ATTEMPTS:
                        pending.appendleft(index)
                        continue
                    task, sample = jobs[index]
                    error = f"lost its Ray worker {attempts[index]} times; last: {exc}"
                    trajectory = crashed(env, task, play[0], sample, error)
                yield index, trajectory
        finally:
            for ref in running:
                self.ray.cancel(ref)

    def _submit(
        self,
        jobs: list[tuple[Task, int]],
        steerings: list[Steering | None],
        pending: deque[int],
        attempts: list[int],
        running: dict[Any, tuple[int, Any]],
        play: tuple[Agent, str | None, RolloutConfig, int],
    ) -> None:
        """Give pending episodes to the least busy workers, up to each one's capacity."""
        load = {id(worker): 0 for worker in self.workers}
        for _, worker in running.values():
            if id(worker) in load:
                load[id(worker)] += 1
        while pending:
            worker = min(self.workers, key=lambda w: load[id(w)])
            if load[id(worker)] >= self.config.episodes_per_worker:
                return
            index = pending.popleft()
            attempts[index] += 1
            task, sample = jobs[index]
            ref = worker.play.remote(*play, task, sample, steerings[index])
            running[ref] = (index, worker)
            load[id(worker)] += 1

    def _replace(self, dead: Any) -> None:
        """Start a worker in place of one that died (once, however many episodes it took)."""
        for slot, worker in enumerate(self.workers):
            if worker is dead:
                self.workers[slot] = self._start()
                self.deaths += 1
