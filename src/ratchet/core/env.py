"""Envs: the contract every environment implements, and the quickest way to write one.

An env is a family of worlds. ``env.tasks(...)`` draws tasks; ``env.session(task)`` starts an
isolated episode whose ``verify()`` reads the world's own state after the episode, never the
agent's claims; ``env.oracle(task)`` solves a task. Those are the members every env has
(:class:`Env`). The optional ones (hindsight's ``describe``, ``problem_key``, the ``tasks``
lever's ``task_from_params``, the threading limits, the env's own ``attacks``, ...) are
declared with their defaults on :class:`~ratchet.core.env_defaults.EnvDefaults` and read
through its accessors, which import from here too. Most envs are a handful of typed tool
functions over a world object, which :class:`SimpleEnv` turns into a full env (see
``docs/envs.md``); a benchmark with a fixed list of tasks gives it a
:class:`~ratchet.core.pool.TaskPool`. Sessions, one episode each, live in
:mod:`ratchet.core.session`; their names import from here too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, Generic, NoReturn, Protocol, TypeVar, runtime_checkable

from ratchet.core.env_defaults import OPTIONAL_MEMBERS as OPTIONAL_MEMBERS
from ratchet.core.env_defaults import Attack as Attack
from ratchet.core.env_defaults import Describe as Describe
from ratchet.core.env_defaults import EnvDefaults as EnvDefaults
from ratchet.core.env_defaults import FromParams as FromParams
from ratchet.core.env_defaults import accepted_findings_of as accepted_findings_of
from ratchet.core.env_defaults import attacks_of as attacks_of
from ratchet.core.env_defaults import describer as describer
from ratchet.core.env_defaults import left_out as left_out
from ratchet.core.env_defaults import max_sessions_of as max_sessions_of
from ratchet.core.env_defaults import params_schema_of as params_schema_of
from ratchet.core.env_defaults import policy_of as policy_of
from ratchet.core.env_defaults import pool_of as pool_of
from ratchet.core.env_defaults import problem_key_of as problem_key_of
from ratchet.core.env_defaults import splitter_of as splitter_of
from ratchet.core.env_defaults import task_builder as task_builder
from ratchet.core.env_defaults import thread_safe_of as thread_safe_of
from ratchet.core.pool import TaskPool
from ratchet.core.session import FINISH as FINISH
from ratchet.core.session import Session as Session
from ratchet.core.session import ToolSession as ToolSession
from ratchet.core.session import end_episode as end_episode
from ratchet.core.session import format_result as format_result
from ratchet.core.task import (
    ProblemKey,
    Sampler,
    Split,
    Task,
    canonical_key,
    generate_tasks,
    split_of,
)
from ratchet.core.tool import Tool, ToolCall
from ratchet.core.verdict import Verdict


@runtime_checkable
class Env(Protocol):
    """A family of worlds with a task generator, an oracle and a state-reading verifier.

    Optional members (``describe``, ``problem_key``, ``task_from_params``, ``thread_safe``,
    ``attacks``, ...) are declared, typed and documented on
    :class:`~ratchet.core.env_defaults.EnvDefaults`, with the default each takes when an env
    leaves it out; an env may subclass that class or simply have the members it gives.

    Threading contract: each episode runs on its own worker thread, which creates the session
    and makes every call to it; episodes of one env run concurrently, so by default ``session()``
    and the sessions' methods may be called from several threads at once. An env that cannot
    take that sets ``thread_safe = False``: no two threads then call into it or its sessions at
    once (episodes still interleave, so a local model batches their turns). An env that can hold
    only some worlds at a time (one game engine, a licence) sets ``max_sessions``.
    """

    @property
    def name(self) -> str:
        """Registered name, e.g. ``"calc"``."""
        ...

    @property
    def description(self) -> str:
        """One line for ``ratchet envs``."""
        ...

    @property
    def version(self) -> str:
        """Bumped whenever tasks, tools or verification change meaning."""
        ...

    @property
    def max_difficulty(self) -> int:
        """Highest difficulty level."""
        ...

    def tasks(
        self, split: Split, n: int, seed: int = 0, difficulty: int | None = None
    ) -> list[Task]:
        """Draw ``n`` tasks of ``split``, each a different problem, deterministically."""
        ...

    def session(self, task: Task) -> Session:
        """Start a fresh, isolated episode for ``task``."""
        ...

    def oracle(self, task: Task) -> list[ToolCall]:
        """Return a sequence of tool calls that solves ``task`` (ending with ``finish``)."""
        ...


def split_of_params(env: Env, params: dict[str, Any]) -> Split:
    """The split a problem with these hidden params belongs to in ``env``.

    A fixed pool's own split if the pool (the env's ``sample``) holds the problem, and
    ``train`` for a problem it does not hold (no held-out task can be it); for a generated env,
    the split its problem key hashes to. Whatever proposes or relabels training tasks must ask
    this, not the hash alone: a benchmark's test problem may hash to ``train``. An env that
    assigns splits its own way (a suite: each member's) declares ``split_of_params(params)``,
    which is asked first.
    """
    own = splitter_of(env)
    if own is not None:
        return own(params)
    problem = problem_key_of(env)(params)
    pool = pool_of(env)
    if pool is not None:
        return pool.split_holding(env.name, problem, problem_key_of(env)) or "train"
    return split_of(problem)


def draw_up_to(env: Env, split: Split, n: int, seed: int = 0) -> list[Task]:
    """``n`` tasks of ``split``, or as many as a small split holds (halving until it draws)."""
    while n >= 1:
        try:
            return env.tasks(split, n, seed=seed)
        except ValueError:
            n //= 2
    return []


class TooFewTasks(RuntimeError):
    """An env's ``tasks()`` returned fewer tasks than asked instead of raising ``ValueError``.

    Attributes:
        returned: The tasks it did return.
    """

    def __init__(self, message: str, returned: list[Task]) -> None:
        super().__init__(message)
        self.returned = returned


def draw_tasks(
    env: Env, split: Split, n: int, seed: int = 0, difficulty: int | None = None
) -> list[Task]:
    """``env.tasks(...)``, held to its contract: ``n`` tasks, or the env's ``ValueError``.

    Raises:
        ValueError: From the env: its split holds fewer than ``n`` problems.
        TooFewTasks: If the env returned fewer than ``n`` tasks without saying why.
    """
    tasks = list(env.tasks(split, n, seed=seed, difficulty=difficulty))
    if len(tasks) < n:
        at = f", difficulty={difficulty}" if difficulty is not None else ""
        raise TooFewTasks(
            f"{env.name}: tasks({split!r}, {n}, seed={seed}{at}) returned only {len(tasks)} "
            f"tasks, fewer than asked (an env whose split holds fewer problems should raise "
            "ValueError saying how many it holds)",
            tasks,
        )
    return tasks


World = TypeVar("World")


def _required(*args: Any) -> NoReturn:
    """Stands in for ``SimpleEnv.verify`` and ``oracle`` until a deprecated name fills them."""
    raise TypeError("a SimpleEnv needs verify= and oracle=")


@dataclass(frozen=True)
class SimpleEnv(Generic[World]):
    """An env made from plain functions: the quickest way to write one.

    Its members use the protocol's vocabulary: ``verify``, ``oracle`` and ``describe`` here are
    the functions behind the session's ``verify()`` and the env's ``oracle()`` and
    ``describe()``.

    Attributes:
        name: Registered name.
        description: One line for ``ratchet envs``.
        sample: ``sample(rng, difficulty) -> TaskSpec``, a pure function of its inputs, or a
            :class:`~ratchet.core.pool.TaskPool` (a fixed list of tasks with its own splits);
            drives :meth:`tasks`.
        build: Makes a fresh world for a task.
        tools: Returns the tools bound to a world: typed functions, or :class:`Tool` objects
            (say, from :meth:`Tool.from_schema`). A tool may return :func:`end_episode` to end
            the episode (a game won or lost).
        verify: ``verify(task, world, answer) -> Verdict``, reading the world's state.
        oracle: ``oracle(task) -> list[ToolCall]``, a solution ending with ``finish``.
        describe: ``describe(trajectory) -> TaskSpec | None``: names the task, in the same
            world, that the trajectory's actions would solve (hindsight); its params must let
            ``build`` recreate that world. ``None``: the env does no hindsight.
        policy: Rules shown to the agent with every task.
        max_difficulty: Highest difficulty level (0, the default: 5 for a sampler, the pool's
            highest for a pool).
        version: Bumped whenever tasks, tools or verification change meaning.
        teardown: Releases a world when its session closes.
        problem_key: What makes two tasks the same problem (default: canonical params).
        observe: ``observe(world) -> str``: the world's first observation (a game's opening
            room), shown after the instruction; ``None`` shows only the instruction.
        thread_safe: ``False`` if no two threads may call into the env's worlds at once.
        max_sessions: How many worlds may be open at once (``None``: no limit).
        task_from_params: ``task_from_params(params) -> TaskSpec``: the task some hidden params
            define, worded by the env; raises ``ValueError`` for params that define none.
            ``None``: tasks cannot be proposed for the env.
        params_schema: JSON schema of the params ``task_from_params`` takes.
        fingerprint: ``fingerprint(world) -> str``: the same text exactly when two worlds are in
            the same state; gives the sessions their optional ``fingerprint()``. ``None``: none.
        accepted_findings: Red-team findings accepted knowingly for ``verify``, check name to
            reason (see :func:`accepted_findings_of`).
        attacks: Known reward hacks of the env's domain that its verifier must fail.
        split_of_params: ``split_of_params(params) -> Split`` for an env that assigns splits
            its own way (see :func:`split_of_params`); ``None``: the pool's, or the key's hash.
        check: Deprecated name of ``verify`` (warns; removed in the next release).
        solve: Deprecated name of ``oracle`` (warns; removed in the next release).
        relabel: Deprecated name of ``describe`` (warns; removed in the next release).
    """

    name: str
    description: str
    sample: Sampler | TaskPool
    build: Callable[[Task], World]
    tools: Callable[[World], Sequence[Callable[..., Any] | Tool]]
    verify: Callable[[Task, World, str | None], Verdict] = _required
    oracle: Callable[[Task], list[ToolCall]] = _required
    describe: Describe | None = None
    policy: str = ""
    max_difficulty: int = 0
    version: str = "1"
    teardown: Callable[[World], None] | None = field(default=None)
    problem_key: ProblemKey = canonical_key
    observe: Callable[[World], str] | None = None
    thread_safe: bool = True
    max_sessions: int | None = None

    task_from_params: FromParams | None = None
    params_schema: dict[str, Any] | None = None
    fingerprint: Callable[[World], str] | None = None
    accepted_findings: Mapping[str, str] = field(default_factory=dict)
    attacks: tuple[Attack, ...] = ()
    split_of_params: Callable[[dict[str, Any]], Split] | None = None
    check: InitVar[Callable[[Task, World, str | None], Verdict] | None] = None
    solve: InitVar[Callable[[Task], list[ToolCall]] | None] = None
    relabel: InitVar[Describe | None] = None

    def __post_init__(
        self,
        check: Callable[[Task, World, str | None], Verdict] | None,
        solve: Callable[[Task], list[ToolCall]] | None,
        relabel: Describe | None,
    ) -> None:
        renamed = (("check", "verify", check), ("solve", "oracle", solve),
                   ("relabel", "describe", relabel))  # fmt: skip
        for old, new, value in renamed:
            if value is not None:
                warnings.warn(
                    f"SimpleEnv({old}=...) is deprecated and goes in the next release; "
                    f"use {new}=...",
                    DeprecationWarning,
                    stacklevel=3,
                )
                object.__setattr__(self, new, value)
        missing = [name for name in ("verify", "oracle") if getattr(self, name) is _required]
        if missing:
            raise TypeError(f"SimpleEnv() needs {' and '.join(f'{m}=' for m in missing)}")
        if self.max_difficulty == 0:
            top = self.sample.max_difficulty if isinstance(self.sample, TaskPool) else 5
            object.__setattr__(self, "max_difficulty", top)

    def tasks(
        self, split: Split, n: int, seed: int = 0, difficulty: int | None = None
    ) -> list[Task]:
        """Draw ``n`` tasks of ``split``, from the pool or the sampler.

        See :meth:`ratchet.core.pool.TaskPool.tasks` and
        :func:`ratchet.core.task.generate_tasks`.
        """
        if isinstance(self.sample, TaskPool):
            if difficulty is not None and not 1 <= difficulty <= self.max_difficulty:
                raise ValueError(
                    f"difficulty for {self.name} must be in 1..{self.max_difficulty}; "
                    f"got {difficulty}"
                )
            return self.sample.tasks(self.name, split, n, seed, difficulty, self.problem_key)
        return generate_tasks(
            self.name,
            self.sample,
            split=split,
            n=n,
            seed=seed,
            difficulty=difficulty,
            max_difficulty=self.max_difficulty,
            problem_key=self.problem_key,
        )

    def session(self, task: Task) -> ToolSession:
        """Build a fresh world for ``task`` and wrap it in a :class:`ToolSession`."""
        world = self.build(task)
        teardown, fingerprint = self.teardown, self.fingerprint
        try:
            tools = [t if isinstance(t, Tool) else Tool.from_function(t) for t in self.tools(world)]
            intro = self.observe(world) if self.observe else ""
        except BaseException:
            if teardown is not None:  # the session never existed to close the world
                teardown(world)
            raise
        return ToolSession(
            task,
            tools,
            lambda answer: self.verify(task, world, answer),
            policy=self.policy,
            close=(lambda: teardown(world)) if teardown else None,
            intro=intro,
            state=None if fingerprint is None else (lambda: fingerprint(world)),
        )
