"""Running many episodes at once.

One scheduler serves every backend: it keeps up to ``concurrency`` episodes active, sends the
next turn of all of them to the model in one batched call (where the local backend's CPU
throughput comes from; remote backends fan the batch out concurrently), then runs the resulting
env steps in a worker pool. Each finished trajectory is handed to ``on_trajectory`` at once, so
a store records it before the next batch starts; an interrupted rollout loses only episodes in
flight, and ``skip`` lets a rerun resume where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ratchet.agent import Agent
from ratchet.env import FINISH, Env
from ratchet.harness import Episode, Limits
from ratchet.models.base import Model, Sampling
from ratchet.retrieval import ExemplarIndex
from ratchet.task import Task
from ratchet.tool import ToolCall
from ratchet.trajectory import Trajectory, play


@dataclass(frozen=True)
class RolloutConfig:
    """How to run a batch of episodes.

    Attributes:
        k: Samples per task.
        concurrency: Episodes active at once (the model's batch size per turn).
        workers: Threads for env steps.
        max_reply_tokens: Cap on tokens per model reply.
        seed: Base sampling seed.
        first_sample: Number the samples from here (so repeated rounds on a task stay distinct).
        limits: Per-episode budgets; ``None`` takes ``max_turns`` from the agent.
    """

    k: int = 1
    concurrency: int = 16
    workers: int = 4
    max_reply_tokens: int = 128
    seed: int = 0
    first_sample: int = 0
    limits: Limits | None = None


def rollout(
    env: Env,
    tasks: Iterable[Task],
    agent: Agent,
    model: Model | None,
    config: RolloutConfig | None = None,
    *,
    skip: set[tuple[str, int]] | None = None,
    on_trajectory: Callable[[Trajectory], object] | None = None,
    progress: Progress | None = None,
    description: str = "rollouts",
) -> list[Trajectory]:
    """Play every task ``k`` times with ``agent`` and return the trajectories in task order.

    Args:
        env: The env the tasks come from.
        tasks: Tasks to play.
        agent: The agent; ``oracle`` and ``null`` run without a model.
        model: The backend (ignored for scripted agents).
        config: Concurrency, samples and budgets.
        skip: ``(task_id, sample)`` pairs already done (for resume).
        on_trajectory: Called with each trajectory as soon as it is finished.
        progress: A rich progress display to add a bar to; ``None`` shows none.
        description: Label for the progress bar.

    Raises:
        ValueError: If a model-driven agent is given no model.
    """
    config = config or RolloutConfig()
    done = skip or set()
    samples = range(config.first_sample, config.first_sample + config.k)
    jobs = [(t, s) for t in tasks for s in samples if (t.id, s) not in done]
    order = {(t.id, s): i for i, (t, s) in enumerate(jobs)}
    results: list[Trajectory] = []

    def finish(trajectory: Trajectory) -> None:
        results.append(trajectory)
        if on_trajectory is not None:
            on_trajectory(trajectory)
        if progress is not None and bar is not None:
            progress.advance(bar)

    bar = progress.add_task(description, total=len(jobs)) if progress is not None else None
    if agent.scripted:
        _play_scripted(env, jobs, agent, config.workers, finish)
    else:
        if model is None:
            raise ValueError(f"agent {agent.version!r} needs a model")
        _play_with_model(env, jobs, agent, model, config, finish)
    return sorted(results, key=lambda t: order[(t.task.id, t.sample)])


def _play_scripted(
    env: Env,
    jobs: list[tuple[Task, int]],
    agent: Agent,
    workers: int,
    finish: Callable[[Trajectory], None],
) -> None:
    def run(job: tuple[Task, int]) -> Trajectory:
        task, sample = job
        calls = (
            env.oracle(task) if agent.version == "oracle" else [ToolCall(FINISH, {"answer": ""})]
        )
        trajectory = play(env, task, calls, agent=agent.version)
        return replace(trajectory, sample=sample, model="scripted")

    with ThreadPoolExecutor(workers) as pool:
        for trajectory in pool.map(run, jobs):
            finish(trajectory)


def _play_with_model(
    env: Env,
    jobs: list[tuple[Task, int]],
    agent: Agent,
    model: Model,
    config: RolloutConfig,
    finish: Callable[[Trajectory], None],
) -> None:
    index = ExemplarIndex(agent.exemplars)
    pending: Iterator[tuple[Task, int]] = iter(jobs)
    active: list[Episode] = []
    turn = 0
    with ThreadPoolExecutor(config.workers) as pool:
        while True:
            while len(active) < config.concurrency and (job := next(pending, None)) is not None:
                task, sample = job
                demos = index.select(task, agent.exemplars_per_task, agent.exemplar_token_budget)
                active.append(Episode(env, task, agent, demos, config.limits, sample))
            finished = [e for e in active if e.done]
            for episode in finished:
                active.remove(episode)
                finish(episode.result())
            if finished:
                continue  # refill the batch before spending a model call
            if not active:
                return
            sampling = Sampling(agent.temperature, config.max_reply_tokens, config.seed + turn)
            completions = model.complete([e.prompt() for e in active], sampling)
            list(pool.map(Episode.advance, active, completions))
            turn += 1


@contextmanager
def progress_bars(
    enabled: bool = True, console: Console | None = None
) -> Iterator[Progress | None]:
    """Yield a rich progress display with rate and ETA columns, or ``None`` when disabled."""
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(show_speed=True),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        transient=False,
    ) as progress:
        yield progress
