"""The optional members of an env: what each is for, and what an env gets without it.

:class:`~ratchet.core.env.Env` names what every env must have. Everything else Ratchet may
read from an env is declared here, once, on :class:`EnvDefaults`, with the value that
stands in for it when an env leaves it out, the way ``gymnasium.Env`` declares ``metadata``,
``render_mode`` and ``spec`` with defaults on its base class. An env may subclass
:class:`EnvDefaults` to inherit the defaults, or just have whichever members it gives:
Ratchet reads each one only through an accessor here (:func:`describer`,
:func:`problem_key_of`, ...), which falls back to the default, and ``ratchet check`` names
the ones an env leaves out (:func:`left_out`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ratchet.core.pool import TaskPool
from ratchet.core.task import ProblemKey, Sampler, Split, Task, TaskSpec, canonical_key
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory

Describe = Callable[[Trajectory], TaskSpec | None]
"""``describe(trajectory) -> TaskSpec | None``: hindsight naming of what an episode did."""

FromParams = Callable[[dict[str, Any]], TaskSpec]
"""``task_from_params(params) -> TaskSpec``: the task some hidden params define."""


@dataclass(frozen=True)
class Attack:
    """A known way to pass an env's tasks without solving them, which its verifier must fail.

    The generic red-team battery (:mod:`ratchet.envs.redteam`) knows nothing of an env's
    domain; an env lists the hacks of its own domain here (a function that returns a
    constant, or sorts its input), and ``ratchet check`` plays each on the env's test tasks as
    the row ``red-team: NAME``.

    Attributes:
        name: What the hack does, in a few words.
        plans: ``plans(task) -> [[ToolCall, ...], ...]``: the whole episodes the hack plays on
            ``task``, one per attempt; an empty list where it does not apply to the task.
    """

    name: str
    plans: Callable[[Task], list[list[ToolCall]]]


class EnvDefaults:
    """The optional members of an env, each with the default that applies when it is left out.

    Each member's docstring says what it is for and what an env without it gets. A member set
    to its default (``None``, empty, or the value below) counts as left out.
    """

    policy: str = ""
    """Rules shown to the agent with every task (a shop's refund policy).

    Without it the agent sees only each task's instruction.
    """

    describe: Describe | None = None
    """``describe(trajectory) -> TaskSpec | None``: hindsight relabelling.

    Names the task, in the same world, that the trajectory's actions would solve, so a failed
    episode still teaches something. Without it the env gets no hindsight relabelling.
    """

    problem_key: ProblemKey = staticmethod(canonical_key)
    """``problem_key(params) -> str``: what makes two tasks the same problem.

    The key decides a task's split and keeps one problem out of two splits. Without it two
    tasks are the same problem when their params' canonical JSON is the same.
    """

    task_from_params: FromParams | None = None
    """``task_from_params(params) -> TaskSpec``: the task some hidden params define.

    Worded by the env; raises ``ValueError`` for params that define no valid task. The
    ``tasks`` lever proposes practice tasks through it. Without it no tasks are proposed for
    the env.
    """

    params_schema: Mapping[str, Any] | None = None
    """JSON schema of the params ``task_from_params`` takes.

    Shown to a task proposer, whose decoding is constrained to it. Without it any JSON object
    is proposed.
    """

    sample: Sampler | TaskPool | None = None
    """Where the env's tasks come from; Ratchet reads it only when it is a ``TaskPool``.

    A pool's problems keep the pool's own splits when a lever proposes or relabels tasks (see
    :func:`~ratchet.core.env.split_of_params`). Without a pool a problem's split is the one its
    problem key hashes to, which for a benchmark may not be the split it ships it in.
    """

    split_of_params: Callable[[dict[str, Any]], Split] | None = None
    """``split_of_params(params) -> Split``: the split of the problem these hidden params define.

    For an env that assigns splits its own way (a suite answers with each member's split);
    asked first by :func:`~ratchet.core.env.split_of_params`. Without it a problem's split is
    its pool's (``sample``) or the one its problem key hashes to.
    """

    thread_safe: bool = True
    """Whether the env and its sessions may be called from several threads at once.

    ``False`` makes the rollout scheduler run every call into the env under one lock (episodes
    still interleave). Without it the env is called from several threads at once.
    """

    max_sessions: int | None = None
    """How many of the env's sessions may be open at once (one game engine, a licence).

    Without it there is no limit beyond the rollout's own concurrency.
    """

    accepted_findings: Mapping[str, str] = MappingProxyType({})
    """Red-team findings accepted knowingly for the env's verifier: check name to reason.

    ``ratchet check`` reports each as accepted with its reason instead of failing, and every
    improve run on the env records it. Without it every red-team finding fails the check.
    """

    attacks: tuple[Attack, ...] = ()
    """Known reward hacks of the env's own domain, which its verifier must fail.

    ``ratchet check`` plays each as a ``red-team: NAME`` row. Without it only the generic
    red-team battery runs.
    """


OPTIONAL_MEMBERS: tuple[str, ...] = tuple(EnvDefaults.__annotations__)
"""The names of every optional env member, in the order :class:`EnvDefaults` declares them."""


def default_of(member: str) -> Any:
    """The value that stands in for ``member`` when an env leaves it out.

    Raises:
        KeyError: If ``member`` is not an optional env member.
    """
    if member not in OPTIONAL_MEMBERS:
        raise KeyError(f"{member!r} is not an optional env member ({', '.join(OPTIONAL_MEMBERS)})")
    return getattr(EnvDefaults, member)


def _given(env: object, member: str) -> Any:
    """The env's ``member``, or its default when the env has it not or has it as ``None``."""
    value = getattr(env, member, None)
    return default_of(member) if value is None else value


def left_out(env: object) -> tuple[str, ...]:
    """The optional members ``env`` leaves out: absent, ``None`` or equal to their default."""
    return tuple(m for m in OPTIONAL_MEMBERS if _given(env, m) == default_of(m))


def splitter_of(env: object) -> Callable[[dict[str, Any]], Split] | None:
    """Return the env's own ``split_of_params``, or ``None`` if it has none."""
    split: Callable[[dict[str, Any]], Split] | None = _given(env, "split_of_params")
    return split


def describer(env: object) -> Describe | None:
    """Return the env's ``describe`` function, or ``None`` if it has none."""
    describe: Describe | None = _given(env, "describe")
    return describe


def task_builder(env: object) -> FromParams | None:
    """Return the env's ``task_from_params`` function, or ``None`` if it has none."""
    build: FromParams | None = _given(env, "task_from_params")
    return build


def params_schema_of(env: object) -> dict[str, Any]:
    """Return the JSON schema of the env's task params (any JSON object if it declares none)."""
    schema: Mapping[str, Any] | None = _given(env, "params_schema")
    return dict(schema) if schema else {"type": "object"}


def problem_key_of(env: object) -> ProblemKey:
    """Return the env's ``problem_key`` function, or the default canonical-params key."""
    key: ProblemKey = _given(env, "problem_key")
    return key


def pool_of(env: object) -> TaskPool | None:
    """The env's fixed task pool, or ``None`` if its tasks are generated (or it says not)."""
    sample = _given(env, "sample")
    return sample if isinstance(sample, TaskPool) else None


def policy_of(env: object) -> str:
    """The rules the env shows with every task (``""`` if it declares none).

    They are the same for every task: whoever reads a conversation for the values of one
    task (exploration copying arguments from it) leaves them out.
    """
    return str(_given(env, "policy"))


def thread_safe_of(env: object) -> bool:
    """Whether the env's sessions may be called from several threads at once (default yes)."""
    return bool(_given(env, "thread_safe"))


def max_sessions_of(env: object) -> int | None:
    """How many of the env's sessions may be open at once (``None``: no limit)."""
    limit = _given(env, "max_sessions")
    return None if limit is None else max(1, int(limit))


def accepted_findings_of(env: object) -> dict[str, str]:
    """The red-team findings accepted knowingly for the env's verifier: check name to reason.

    A benchmark ported as it is keeps its own reward rule, holes included (a published scorer
    that passes any answer containing the gold string passes a hedged one too). Declaring such
    a finding, ``{"red-team: hedged answer": "the benchmark's own substring rule"}``, makes
    ``check_env`` report it as accepted with the reason instead of failing, and every
    ``ratchet improve`` run on the env records it in its summary; nothing is accepted silently.
    """
    accepted: Mapping[str, str] = _given(env, "accepted_findings")
    return dict(accepted)


def attacks_of(env: object) -> tuple[Attack, ...]:
    """Return the env's own known reward hacks (none if it lists none)."""
    return tuple(_given(env, "attacks"))
