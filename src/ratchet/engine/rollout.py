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
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

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
from ratchet.core.trajectory import Trajectory
from ratchet.engine.batching import Batcher
from ratchet.engine.context import Context, ContextPolicy
from ratchet.engine.guard import guarded
from ratchet.engine.harness import Budget, crashed, parse_action, replay, run_episode
from ratchet.engine.models.base import (
    BatchedModel,
    Completion,
    Model,
    ModelError,
    Prompt,
    Sampling,
    WindowedModel,
    tool_name,
)
from ratchet.engine.models.copying import conversation_spans, result_spans, uses_left

Play = Callable[[Task, int], Trajectory]


@dataclass(frozen=True)
class Exploration:
    """How one episode explores (training episodes; probe and test play the agent as it is).

    Attributes:
        temperature: The episode's own sampling temperature (``None``: the agent's).
        min_calls: Acting calls the episode makes before ``finish`` is offered to the decoder:
            an agent that learned to finish after one call still tries longer plans. A call
            counts when its tool takes arguments: one that takes none only reads the state in
            every built-in env (grid's ``look``, shop's ``list_products``), and 69% of a grid
            agent's episodes opened with ``look``, which left a level-2 task one action and
            ``finish``. The prompt is unchanged (the decoder enforces it, see
            :attr:`Prompt.allowed_tools`), so a success found this way trains like any other.
        first_tool: Restrict the first call to one tool other than ``finish``, drawn by
            this number (see :func:`drawn_tool`): every second draw is among the tools the
            task names by their verb (``move_file`` for "move ... into logs/"; grid's
            ``take``, "Pick up an item", for "pick it up"), the others among all of them.
            An agent that always opens with the same call (a listing, say) never sees what
            the other tools return, and hindsight has nothing else to name; a uniform draw
            over the eight tools of ``files`` opens one sample of a "move" task in eight with
            a move. Like ``min_calls``, the decoder enforces it and the prompt is unchanged.
            ``None``: the first call is the agent's own choice.
        last_tool: Restrict the last call before ``finish`` is offered (the call after
            ``min_calls`` - 1 acting calls; the first call when ``min_calls`` is 0 or 1) to one
            tool other than ``finish``, drawn by this number like ``first_tool`` (which wins
            when both fall on the first call). A built-in ladder adds one step per level, so
            an agent that mastered level L-1 mostly gets the first L-1 calls of a level-L plan
            right and has never learned the step that ends it: it makes the same wrong last
            call on every sample (calc: ``divide`` where the task says "grows to 8 times").
            ``None``: the agent's own choice.
        copy_arguments: Restrict every free string and number argument to a span of the
            conversation (:mod:`ratchet.engine.models.copying`): an agent that knows which
            tool to call but invents its arguments (an email, an order id) gets them right
            by choosing among what it was told. Enforced by the decoder.
        skip_repeats: Never call a tool that takes no arguments right after calling it: with
            nothing done in between, the call can only say again what it just said (a grid
            agent that looks four times in a row learns nothing and leaves hindsight nothing
            to name). Enforced by the decoder.
        chain: With ``copy_arguments``, every call after a successful one copies at least
            one argument from that call's result (:func:`.copying.chain_on`): an agent made to
            go on past its first call otherwise repeats that call's arguments, and a plan of
            several steps is calls that take up what the last one returned. Enforced by the
            decoder.
        fresh: With ``copy_arguments``, a value an earlier call of the episode passed as an argument
            is no longer offered, unless the conversation mentions it again
            (:func:`.copying.uses_left`; a result, a number given twice): an agent made to take up a
            result otherwise passes the first call's operands again beside it, where the plan needs
            the next given value. Within a call too: a chained call passes a result left once in
            one argument only (not ``subtract(-23, -23)``). Enforced by the decoder.
    """

    temperature: float | None = None
    min_calls: int = 0
    first_tool: int | None = None
    last_tool: int | None = None
    copy_arguments: bool = False
    skip_repeats: bool = False
    chain: bool = False
    fresh: bool = False


DRAWN_CALLS = ("first_tool", "last_tool")
"""The metadata keys under which an episode records a call the decoder drew for it (see
:attr:`Exploration.first_tool` and :attr:`Exploration.last_tool`)."""

Explore = Callable[[Task, int], Exploration]
"""``explore(task, sample) -> Exploration``: how each episode explores."""


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are run.

    Attributes:
        concurrency: Episodes in flight at once (a local model's largest batch).
        max_reply_tokens: Cap on tokens per model reply.
        budget: Per-episode turn, token and time budgets.
        context: What prompts leave out when they outgrow the model's context window.
    """

    concurrency: int = 16
    max_reply_tokens: int = 128
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
    explore: Explore | None = None,
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
        explore: ``explore(task, sample)``: how each episode explores (recorded in its
            ``metadata["temperature"]``, ``metadata["min_calls"]``,
            ``metadata["first_tool"]``, ``metadata["last_tool"]``, ``metadata["copy_arguments"]``,
            ``metadata["skip_repeats"]``, ``metadata["chain"]`` and ``metadata["fresh"]``);
            ``None``: the agent as it is.

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
    play = player(env, agent, model, config, seed, batcher, explore)
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
    explore: Explore | None = None,
) -> Play:
    """Return ``play(task, sample) -> Trajectory`` for ``agent``: one episode, as rollouts play it.

    Args:
        env: The env the tasks come from.
        agent: The agent; ``oracle`` and ``null`` need no model.
        model: The backend (``None`` for scripted agents).
        config: Reply cap and budgets.
        seed: Base sampling seed (each episode derives its own from it, its task and sample).
        batcher: Gathers the calls of concurrent episodes into batches (for a local model).
        explore: ``explore(task, sample)``: how each episode explores; ``None``: the agent
            as it is.

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
        # The episode's own temperature travels with its prompts, so a batch can mix them.
        own = Exploration() if explore is None else explore(task, sample)
        forced: dict[str, str] = {}
        # Calls to tools that take arguments so far (see Exploration.min_calls).
        acted = 0
        # Spending applies to copied arguments only, so only copying samples keep count.
        spending = own.copy_arguments and own.fresh
        spent: list[object] = []

        def policy(prompt: Prompt, turn: int) -> Completion:
            nonlocal acted
            # The seed travels with the prompt too: the batcher merges this request with
            # others, and the batch's own seed would make the sample depend on its company.
            turn_seed = episode_seed + turn
            sampling = Sampling(agent.temperature, config.max_reply_tokens, turn_seed)
            prompt = replace(
                prompt, key=f"{task.id}:{sample}", temperature=own.temperature, seed=turn_seed
            )
            due = _due_draw(own, turn, acted, forced)
            if due is not None and (callable_tools := _calls(prompt)):
                key, draw = due
                forced[key] = drawn_tool(callable_tools, task.instruction, draw)
                prompt = replace(prompt, allowed_tools=(forced[key],))
            elif acted < own.min_calls:
                prompt = replace(prompt, allowed_tools=tuple(_calls(prompt)) or None)
            if own.skip_repeats and turn and (fresh := _without_repeat(prompt)):
                prompt = replace(prompt, allowed_tools=fresh)
            if own.copy_arguments:
                messages = prompt.messages
                if spending:
                    left = uses_left(messages, spent)
                    once = tuple(span for span, uses in left.items() if uses == 1)
                    prompt = replace(prompt, copy_spans=tuple(left), once_spans=once)
                else:
                    prompt = replace(prompt, copy_spans=conversation_spans(messages))
                if own.chain:
                    prompt = replace(prompt, chain_spans=result_spans(messages))
            if batcher is not None:
                completion = batcher.complete(prompt, sampling)
            else:
                completion = model.complete([prompt], sampling)[0]
            if isinstance(call := parse_action(completion), ToolCall):
                acted += _takes_arguments(prompt, call.name)
                if spending:
                    spent.extend(call.arguments.values())
            return completion

        demos = index.select(task, agent.exemplars_per_task, agent.exemplar_token_budget)
        skills = select_skills(agent.skills, task, agent.skills_per_task)
        played = run_episode(
            env,
            task,
            agent,
            policy,
            config.budget,
            demonstrations=demos,
            skills=skills,
            sample=sample,
            context=context,
        )
        if explore is None:
            return played
        metadata: dict[str, Any] = {"temperature": own.temperature}
        if own.min_calls:
            metadata["min_calls"] = own.min_calls
        metadata.update(forced)
        if own.copy_arguments:
            metadata["copy_arguments"] = True
        if own.skip_repeats:
            metadata["skip_repeats"] = True
        if own.copy_arguments and own.chain:
            metadata["chain"] = True
        if spending:
            metadata["fresh"] = True
        return replace(played, metadata={**played.metadata, **metadata})

    return play


_ARTICLES = frozenset({"a", "an", "the"})


def drawn_tool(tools: Mapping[str, str], instruction: str, draw: int) -> str:
    """The tool an exploring episode must call (first or last), drawn by ``draw``.

    A tool is named when the first word of its name (``move`` of ``move_file``) or of its
    description (``Pick`` of grid's ``take``, "Pick up an item ...", for "pick it up") is a
    word of ``instruction``, in any case. An even ``draw`` picks among the named tools, if
    any; an odd one (or any, when none is named) among all ``tools``. Either way the pick is
    the one at ``draw // 2`` (modulo their number) in name order.

    Args:
        tools: The tools the episode may call (not empty), each name with its description.
        instruction: The task's instruction.
        draw: The episode's draw (any non-negative integer).
    """
    words = set(re.findall(r"[a-z]+", instruction.lower()))
    everything = sorted(tools)
    named = [name for name in everything if _verbs(name, tools[name]) & words]
    pool = named if named and draw % 2 == 0 else everything
    return pool[draw // 2 % len(pool)]


def _verbs(name: str, description: str) -> set[str]:
    """The words a tool is named by: the first of its name and of its description.

    A description's first word is its verb in a docstring's imperative summary line; one
    that opens with an article ("A tool that ...") would be named by every "a" of a task.
    """
    verbs = {name.lower().split("_")[0]}
    first = re.match(r"[A-Za-z]+", description.strip())
    if first is not None and first.group().lower() not in _ARTICLES:
        verbs.add(first.group().lower())
    return verbs


def _due_draw(
    own: Exploration, turn: int, acted: int, forced: dict[str, str]
) -> tuple[str, int] | None:
    """The drawn call due at ``turn`` after ``acted`` acting calls: its metadata key and draw.

    The first call's draw at turn 0; the last call's once, when one acting call is left before
    ``finish`` is offered. ``None`` when no draw is due.
    """
    if own.first_tool is not None and turn == 0:
        return "first_tool", own.first_tool
    due = acted == max(own.min_calls, 1) - 1
    if own.last_tool is not None and due and "last_tool" not in forced:
        return "last_tool", own.last_tool
    return None


def _takes_arguments(prompt: Prompt, name: str) -> bool:
    """Whether ``prompt``'s tool ``name`` takes arguments.

    ``True`` for a tool the prompt lacks: nothing says that one only reads.
    """
    schema = next((t for t in prompt.tools if tool_name(t) == name), None)
    if schema is None:
        return True
    return bool(schema.get("function", schema).get("parameters", {}).get("properties"))


def _without_repeat(prompt: Prompt) -> tuple[str, ...] | None:
    """The tools ``prompt`` may call, without the last reply's if it takes no arguments.

    ``None`` when there is nothing to leave out, or leaving it out would leave no tool.
    """
    last = next((m for m in reversed(prompt.messages) if m.get("role") == "assistant"), None)
    calls = (last or {}).get("tool_calls") or []
    if not calls:
        return None
    name = calls[0].get("function", {}).get("name")
    if not isinstance(name, str) or _takes_arguments(prompt, name):
        return None
    names = prompt.allowed_tools or tuple(map(tool_name, prompt.tools))
    others = tuple(n for n in names if n != name)
    return others or None


def _calls(prompt: Prompt) -> dict[str, str]:
    """The tools ``prompt`` offers, but ``finish``, each name with its description."""
    functions = (tool.get("function", tool) for tool in prompt.tools)
    return {
        name: str(function.get("description") or "")
        for function, name in zip(functions, map(tool_name, prompt.tools), strict=True)
        if name and name != FINISH
    }


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
