"""Running many episodes at once.

Each episode runs :func:`ratchet.engine.harness.run_episode` on its own worker thread, up to
``concurrency`` at a time, and advances as soon as its own reply arrives. Remote backends are
called per episode (the server batches); a local model is shared through a
:class:`~ratchet.engine.batching.Batcher`, which turns the concurrent requests into batched
calls. Finished trajectories are handed to ``on_trajectory`` on the calling thread in task order,
each as soon as it and those before it are done, so a store records them at once and in an
order that does not depend on timing; an interrupted rollout loses only the episodes in flight
(or waiting for an earlier one), and ``skip`` lets a rerun resume where it stopped.

The env's threading contract is honoured here: at most ``max_sessions`` episodes run at once,
and an env that is not ``thread_safe`` is entered by one thread at a time
(:mod:`ratchet.engine.guard`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

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

from ratchet.core.agent import Agent
from ratchet.core.env import FINISH, Env, max_sessions_of
from ratchet.core.memory import ExemplarIndex, select_skills
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Exploration, Trajectory
from ratchet.engine.batching import Batcher
from ratchet.engine.context import Context, ContextPolicy
from ratchet.engine.guard import guarded
from ratchet.engine.harness import Budget, Policy, crashed, replay, run_episode
from ratchet.engine.models.base import (
    BatchedModel,
    Completion,
    Model,
    ModelError,
    Prompt,
    Sampling,
    WindowedModel,
)

Play = Callable[[Task, int], Trajectory]


class SteeredPolicy(Protocol):
    """One episode's policy as a steering wraps it, which can say afterwards how it explored."""

    def __call__(self, prompt: Prompt, turn: int) -> Completion:
        """Return the reply for ``turn`` (see :data:`~ratchet.engine.harness.Policy`)."""
        ...

    def record(self) -> Exploration:
        """How the episode explored, once it is over."""
        ...


class Steering(Protocol):
    """How one training episode explores: a wrapper around its policy.

    The engine knows nothing of exploration beyond this seam (an improvement run's explorer
    implements it, see :mod:`ratchet.improve.explore`). A steering may travel to a Ray worker,
    so it must pickle.
    """

    def wrap(self, policy: Policy) -> SteeredPolicy:
        """Return the episode's policy: ``policy`` (the agent's own) steered."""
        ...


Steer = Callable[[Task, int], Steering | None]
"""``steer(task, sample)``: how each episode explores (``None``: the agent as it is)."""


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are run.

    Attributes:
        concurrency: Episodes in flight at once (a local model's largest batch).
        max_reply_tokens: Cap on tokens per model reply, which a local model that constrains
            its replies lowers to what the tools offered need (docs/models.md).
        budget: Per-episode turn, token and time budgets.
        context: What prompts leave out when they outgrow the model's context window.
    """

    concurrency: int = 16
    max_reply_tokens: int = 256
    budget: Budget = field(default_factory=Budget)
    context: ContextPolicy = field(default_factory=ContextPolicy)


def rollout(
    env: Env,
    tasks: Iterable[Task],
    agent: Agent,
    model: Model | None,
    config: RolloutConfig | None = None,
    *,
    k: int = 1,
    seed: int = 0,
    first_sample: int = 0,
    skip: set[tuple[str, int]] | None = None,
    on_trajectory: Callable[[Trajectory], object] | None = None,
    progress: Progress | None = None,
    description: str = "rollouts",
    steer: Steer | None = None,
) -> list[Trajectory]:
    """Play every task ``k`` times with ``agent`` and return the trajectories in task order.

    Args:
        env: The env the tasks come from.
        tasks: Tasks to play.
        agent: The agent; ``oracle`` and ``null`` run without a model.
        model: The backend (ignored for scripted agents).
        config: Concurrency, reply cap and budgets.
        k: Samples per task.
        seed: Base sampling seed; each episode derives its own from it, its task and sample.
        first_sample: Number the samples from here (so repeated rounds on a task stay distinct).
        skip: ``(task_id, sample)`` pairs already done (for resume).
        on_trajectory: Called with each trajectory, in task order, once it and every earlier
            one are finished.
        progress: A rich progress display to add a bar to; ``None`` shows none.
        description: Label for the progress bar.
        steer: ``steer(task, sample)``: how each episode explores (its record lands in the
            trajectory's ``exploration``); ``None``: the agent as it is.

    Raises:
        ValueError: If a model-driven agent is given no model.
        ModelError: If the backend cannot work at all (the episodes not started are dropped).
    """
    config = config or RolloutConfig()
    limit = max_sessions_of(env)
    if limit is not None and limit < config.concurrency:
        config = replace(config, concurrency=limit)
    env = guarded(env)
    jobs = episode_jobs(tasks, k, first_sample, skip)
    batcher = _batcher(agent, model, config, len(jobs))
    play = player(env, agent, model, config, seed, batcher, steer)
    with ThreadPoolExecutor(max(1, config.concurrency), "ratchet-episode") as pool:
        futures = {pool.submit(play, task, sample): i for i, (task, sample) in enumerate(jobs)}

        def finished() -> Iterator[tuple[int, Trajectory]]:
            for count, future in enumerate(as_completed(futures), 1):
                trajectory = future.result()
                if batcher is not None:
                    batcher.in_flight(min(config.concurrency, len(jobs) - count))
                yield futures[future], trajectory

        try:
            return collect(finished(), len(jobs), on_trajectory, progress, description)
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def episode_jobs(
    tasks: Iterable[Task], k: int, first_sample: int, skip: set[tuple[str, int]] | None
) -> list[tuple[Task, int]]:
    """Every ``(task, sample)`` to play, in task order, but those in ``skip``."""
    samples = range(first_sample, first_sample + k)
    return [(t, s) for t in tasks for s in samples if (t.id, s) not in (skip or set())]


def collect(
    finished: Iterable[tuple[int, Trajectory]],
    count: int,
    on_trajectory: Callable[[Trajectory], object] | None,
    progress: Progress | None,
    description: str,
) -> list[Trajectory]:
    """Gather ``count`` episodes as they finish and return them in job order.

    Args:
        finished: ``(job index, trajectory)`` in the order the episodes finished; an index
            seen before is ignored.
        count: How many jobs there are.
        on_trajectory: Called with each trajectory, in job order, once it and every earlier
            one are finished.
        progress: A rich progress display to add a bar to; ``None`` shows none.
        description: Label for the progress bar.

    Raises:
        ModelError: If every episode ended on a model error.
    """
    bar = progress.add_task(description, total=count) if progress is not None else None
    done: dict[int, Trajectory] = {}
    released = 0
    for index, trajectory in finished:
        if index in done:
            continue  # never record an episode twice
        done[index] = trajectory
        if progress is not None and bar is not None:
            progress.advance(bar)
        # Hand trajectories on in job order, so what a store records (and so what
        # learns from it) does not depend on which episode happened to finish first.
        while released in done and on_trajectory is not None:
            on_trajectory(done[released])
            released += 1
    results = [done[i] for i in range(count)]
    check_model_errors(results)
    return results


def check_model_errors(results: list[Trajectory]) -> None:
    """Raise if every episode ended on a model error: the backend is not working at all.

    Raises:
        ModelError: Quoting the first episode's error.
    """
    failed = [t for t in results if t.error is not None and t.error.startswith("model error")]
    if failed and len(failed) == len(results):
        raise ModelError(
            f"every model call failed ({len(failed)} episodes, stored); first: {failed[0].error}"
        )


def _batcher(
    agent: Agent, model: Model | None, config: RolloutConfig, episodes: int
) -> Batcher | None:
    """A batcher for a local model (remote servers batch concurrent requests themselves)."""
    if agent.scripted or not isinstance(model, BatchedModel):
        return None
    batcher = Batcher(model, min(config.concurrency, model.max_batch_size))
    batcher.in_flight(min(config.concurrency, episodes))
    return batcher


def player(
    env: Env,
    agent: Agent,
    model: Model | None,
    config: RolloutConfig,
    seed: int,
    batcher: Batcher | None = None,
    steer: Steer | None = None,
) -> Play:
    """Return ``play(task, sample) -> Trajectory`` for ``agent``: one episode, as rollouts play it.

    Args:
        env: The env the tasks come from.
        agent: The agent; ``oracle`` and ``null`` need no model.
        model: The backend (``None`` for scripted agents).
        config: Reply cap and budgets.
        seed: Base sampling seed (each episode derives its own from it, its task and sample).
        batcher: Gathers the calls of concurrent episodes into batches (for a local model).
        steer: ``steer(task, sample)``: how each episode explores; ``None``: the agent as it is.

    Raises:
        ValueError: If a model-driven agent is given no model.
    """
    if agent.scripted:
        return lambda task, sample: _scripted(env, agent, task, sample)
    if model is None:
        raise ValueError(f"agent {agent.version!r} needs a model")
    index = ExemplarIndex(agent.exemplars)
    context = _context(model, config)

    def play(task: Task, sample: int) -> Trajectory:
        episode_seed = seed + _episode_seed(task, sample)

        def policy(prompt: Prompt, turn: int) -> Completion:
            # The seed travels with the prompt: the batcher merges this request with others,
            # and the batch's own seed would make the sample depend on its company. A steering
            # that draws again at one turn gives its own.
            prompt = replace(
                prompt,
                key=f"{task.id}:{sample}",
                seed=episode_seed + turn if prompt.seed is None else prompt.seed,
            )
            sampling = Sampling(agent.temperature, config.max_reply_tokens)
            if batcher is not None:
                return batcher.complete(prompt, sampling)
            return model.complete([prompt], sampling)[0]

        steering = None if steer is None else steer(task, sample)
        steered = None if steering is None else steering.wrap(policy)
        exemplars = index.select(task, agent.exemplars_per_task, agent.exemplar_token_budget)
        skills = select_skills(agent.skills, task, agent.skills_per_task)
        played = run_episode(
            env,
            task,
            agent,
            steered or policy,
            config.budget,
            demonstrations=exemplars,
            skills=skills,
            sample=sample,
            context=context,
        )
        if steered is None:
            return played
        return replace(played, exploration=steered.record())

    return play


def _context(model: Model, config: RolloutConfig) -> Context | None:
    """The context policy over ``model``'s window, if the model declares one."""
    if not isinstance(model, WindowedModel) or model.context_window is None:
        return None
    return Context(
        model.context_window, config.max_reply_tokens, model.count_tokens, config.context
    )


def _scripted(env: Env, agent: Agent, task: Task, sample: int) -> Trajectory:
    """Play the ``oracle`` (the env's solution) or ``null`` (finish at once, empty answer)."""
    try:
        calls = (
            env.oracle(task) if agent.version == "oracle" else [ToolCall(FINISH, {"answer": ""})]
        )
    except Exception as exc:  # a broken oracle is one crashed episode, not a crashed run
        return crashed(env, task, agent, sample, f"oracle failed: {type(exc).__name__}: {exc}")
    return replace(replay(env, task, calls, agent), sample=sample, model="scripted")


def _episode_seed(task: Task, sample: int) -> int:
    """A seed per (task, sample), so an episode samples alike whatever else runs beside it."""
    return int(hashlib.sha256(f"{task.id}:{sample}".encode()).hexdigest()[:8], 16)


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
