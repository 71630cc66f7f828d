"""Practice tasks the agent needs: new training tasks aimed at its failures, validated first.

The incumbent's failed training episodes are clustered by family, difficulty and kind of error;
for the largest clusters a proposer writes new tasks as hidden params inside the env's task
schema (``params_schema``), and the env words each one (``task_from_params``). A proposal is
practised only if it passes validation: the params define a task, its problem belongs to the
``train`` split (never probe or test: a fixed pool's own splits decide for its problems, see
:func:`~ratchet.core.env.split_of_params`), it is not a problem already practised or
proposed, it is no harder than what is practised, and both the null policy (finish with an
empty answer) and a forged claim of success fail it. Rejections are counted by reason. The
env's oracle is never asked whether a proposal can be solved: practice shows it. Valid
proposals go to the run's curriculum, which mixes the ones not solved yet into later rounds,
and the incumbent practises them at once; a proposal counts as solved once one of its
verified episodes solves it, and only such verified successes (hindsight relabels included)
become demonstrations in the candidate this lever proposes.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema

from ratchet.core.agent import Agent
from ratchet.core.env import (
    FINISH,
    Env,
    params_schema_of,
    problem_key_of,
    split_of_params,
    task_builder,
)
from ratchet.core.memory import to_exemplar
from ratchet.core.task import Task, make_task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Trajectory, tool_steps
from ratchet.core.verdict import FORGED_CLAIM
from ratchet.engine.harness import parse_action, replay
from ratchet.engine.models.base import Model, Prompt, Sampling
from ratchet.improve.hindsight import relabel_all
from ratchet.improve.levers.base import LeverContext, NoCandidate

PROPOSE_PROMPT = (
    "You write practice tasks for an agent that solves tasks with tools. Each task is given "
    "by its hidden parameters, in the same format as the examples. The agent failed the "
    "examples; write new tasks of the same kind with different values, a little easier than "
    "the examples if asked, so that the agent can learn what it gets wrong."
)


@dataclass(frozen=True)
class Cluster:
    """Failed training episodes of one kind.

    Attributes:
        family: Their task family.
        difficulty: Their difficulty.
        error: What went wrong, in a few words.
        failures: How many episodes failed this way.
        success_rate: The incumbent's success rate at this family and difficulty.
        target: The difficulty to ask for: one lower where the agent never succeeds.
        examples: A few of the failed tasks.
    """

    family: str
    difficulty: int
    error: str
    failures: int
    success_rate: float
    target: int
    examples: tuple[Task, ...]


@dataclass(frozen=True)
class TaskRequest:
    """What a proposer is asked for.

    Attributes:
        env: The env's name.
        cluster: The failures to aim at.
        n: How many tasks to write.
        schema: JSON schema of the params to write.
        seed: Seed for anything random.
    """

    env: str
    cluster: Cluster
    n: int
    schema: dict[str, Any]
    seed: int = 0


class TaskProposer(Protocol):
    """Writes the params of new training tasks."""

    def __call__(self, request: TaskRequest) -> list[Any]:
        """Return up to ``request.n`` params (JSON objects); anything else is rejected."""
        ...


@dataclass(frozen=True)
class ModelProposer:
    """Ask a model to call ``propose_tasks`` with new params (any backend; constrained locally).

    Attributes:
        model: The model that writes the tasks.
        max_reply_tokens: Cap on its reply.
    """

    model: Model
    max_reply_tokens: int = 256

    def __call__(self, request: TaskRequest) -> list[Any]:
        """Return the params the model wrote (nothing if its reply holds no valid call)."""
        tool = {
            "type": "function",
            "function": {
                "name": "propose_tasks",
                "description": "Submit new practice tasks, each as its hidden parameters.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "tasks": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": request.n,
                            "items": request.schema,
                        }
                    },
                    "required": ["tasks"],
                    "additionalProperties": False,
                },
            },
        }
        cluster = request.cluster
        examples = "\n".join(
            f"- {t.instruction}\n  params: {json.dumps(t.params, sort_keys=True)}"
            for t in cluster.examples
        )
        text = (
            f"Failed tasks (family {cluster.family}, difficulty {cluster.difficulty}; "
            f"what went wrong: {cluster.error}):\n{examples}\n\n"
            f"Write {request.n} new tasks of difficulty {cluster.target}."
        )
        messages = (
            {"role": "system", "content": PROPOSE_PROMPT},
            {"role": "user", "content": text},
        )
        sampling = Sampling(0.9, self.max_reply_tokens, request.seed)
        reply = self.model.complete([Prompt(messages, (tool,))], sampling)[0]
        action = parse_action(reply)
        if isinstance(action, str) or action.name != "propose_tasks":
            return []
        tasks = action.arguments.get("tasks")
        return list(tasks) if isinstance(tasks, list) else []


@dataclass(frozen=True)
class VariantProposer:
    """Write variants of the failed tasks' params without a model.

    Numbers are nudged, and lists of records shortened when an easier task is asked for. A scripted
    proposer, for tests and for envs whose params are mostly numbers.
    """

    def __call__(self, request: TaskRequest) -> list[Any]:
        """Return ``request.n`` variants of the cluster's examples' params."""
        rng = random.Random(request.seed)
        keys = set((request.schema.get("properties") or {}).keys())
        easier = request.cluster.target < request.cluster.difficulty
        variants = []
        for index in range(request.n):
            params = request.cluster.examples[index % len(request.cluster.examples)].params
            kept = {k: v for k, v in params.items() if not keys or k in keys}
            variants.append(_vary(kept, rng, easier))
        return variants


def _vary(value: Any, rng: random.Random, easier: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | list | dict):
        return value
    if isinstance(value, int):
        return max(1, value + rng.choice((-2, -1, 1, 2)) * max(1, abs(value) // 4))
    if isinstance(value, dict):
        return {key: _vary(item, rng, easier) for key, item in value.items()}
    varied = [_vary(item, rng, easier) for item in value]
    # A list of records (steps, items, moves) gets one fewer for an easier task; a list of
    # scalars is one record's fields, and keeps its shape.
    records = all(isinstance(item, list | dict) for item in value)
    return varied[:-1] if easier and records and len(varied) > 1 else varied


@dataclass(frozen=True)
class TaskLever:
    """Propose practice tasks aimed at the incumbent's failures, and practise them.

    The candidate is the incumbent plus its verified successes on those tasks, as
    demonstrations; the tasks themselves join the run's curriculum.

    Attributes:
        proposer: Writes the tasks; ``None``: a :class:`ModelProposer` on the reflector (or the
            incumbent's model), or a :class:`VariantProposer` when there is no model.
        clusters: Failure clusters aimed at per proposal (the largest first).
        per_cluster: Tasks asked for per cluster.
        practice_k: Samples the incumbent plays per accepted task.
        pool_size: Most demonstrations the candidate keeps.
    """

    proposer: TaskProposer | None = None
    clusters: int = 3
    per_cluster: int = 4
    practice_k: int = 2
    pool_size: int = 256
    name: str = "tasks"

    def propose(self, context: LeverContext) -> Agent | None:
        """Return the candidate, or say why there is none.

        Raises:
            ValueError: If the env cannot build tasks from params (no ``task_from_params``).
            NoCandidate: Without a valid proposal, or when practice solved none.
        """
        env = context.env
        if task_builder(env) is None:
            raise ValueError(
                f"the tasks lever needs env {env.name!r} to build tasks from params "
                "(an optional task_from_params method; see docs/improve.md)"
            )
        aims = failure_clusters(context.experience, context.incumbent.version, env.name)
        proposer = self.proposer or _default_proposer(context)
        known = {t.task.problem for t in context.experience}
        ceiling = max((t.task.difficulty for t in context.experience), default=1)
        valid: list[Task] = []
        rejected: Counter[str] = Counter()
        for index, cluster in enumerate(aims[: self.clusters]):
            request = TaskRequest(
                env.name, cluster, self.per_cluster, params_schema_of(env), context.seed + index
            )
            for params in proposer(request):
                task = validate(env, params, known, ceiling, cluster.target)
                if isinstance(task, str):
                    rejected[task] += 1
                    continue
                known.add(task.problem)
                valid.append(task)
        if context.offer_tasks is not None:
            context.offer_tasks(valid, rejected)
        if not valid:
            reasons = ", ".join(f"{n} {why}" for why, n in sorted(rejected.items()))
            raise NoCandidate(f"no valid new task ({reasons or 'none proposed'})")
        if context.play is None:
            return None
        return self._candidate(context, valid, rejected, ceiling)

    def _candidate(
        self, context: LeverContext, tasks: list[Task], rejected: Counter[str], ceiling: int
    ) -> Agent | None:
        assert context.play is not None
        incumbent = context.incumbent
        played = context.play(incumbent, tasks, self.practice_k)
        solved_ids = {t.task.id for t in played if t.passed and not t.errors}
        relabelled = relabel_all(context.env, played, incumbent, ceiling).successes
        solved = [t for t in (*played, *relabelled) if t.passed and not t.errors]
        best: dict[str, Trajectory] = {}
        for trajectory in solved:
            kept = best.get(trajectory.task.problem)
            if kept is None or len(trajectory.steps) < len(kept.steps):
                best[trajectory.task.problem] = trajectory
        if not best:
            raise NoCandidate(f"the incumbent solved none of {len(tasks)} new tasks")
        known = {e.instruction for e in incumbent.exemplars}
        new = [to_exemplar(t) for t in best.values() if t.task.instruction not in known]
        if not new:
            raise NoCandidate("every solved new task is already an exemplar")
        return incumbent.derive(
            context.version,
            self.name,
            exemplars=(*incumbent.exemplars, *new)[-self.pool_size :],
            notes={
                "tasks_offered": len(tasks),
                "tasks_solved": len(solved_ids),
                "tasks_rejected": dict(sorted(rejected.items())),
                "practice_passed": sum(t.passed for t in played),
                "practice_episodes": len(played),
            },
        )


def _default_proposer(context: LeverContext) -> TaskProposer:
    model = context.reflector or context.model
    return VariantProposer() if model is None else ModelProposer(model)


def failure_clusters(experience: Sequence[Trajectory], agent: str, env: str) -> list[Cluster]:
    """Cluster ``agent``'s failed training episodes in ``env`` by family, difficulty and error.

    Episodes of other agents are used only when ``agent`` has none. Largest clusters first.
    """
    own = [t for t in experience if t.task.env == env and not t.metadata.get("hindsight")]
    mine = [t for t in own if t.agent == agent] or own
    rates: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    groups: dict[tuple[str, int, str], list[Trajectory]] = defaultdict(list)
    for trajectory in mine:
        kind = (trajectory.task.family, trajectory.task.difficulty)
        rates[kind][0] += trajectory.passed
        rates[kind][1] += 1
        if not trajectory.passed:
            groups[(*kind, error_kind(trajectory))].append(trajectory)
    clusters = []
    for (family, difficulty, error), failed in groups.items():
        passes, attempts = rates[(family, difficulty)]
        rate = passes / attempts
        examples = tuple({t.task.id: t.task for t in failed}.values())[:3]
        target = max(1, difficulty - 1) if rate == 0 else difficulty
        clusters.append(Cluster(family, difficulty, error, len(failed), rate, target, examples))
    return sorted(clusters, key=lambda c: (-c.failures, c.family, c.difficulty, c.error))


def error_kind(trajectory: Trajectory) -> str:
    """What went wrong in a failed episode, in a few words shared by similar failures."""
    if trajectory.error is not None:
        return "the episode crashed"
    if trajectory.truncated:
        return "ran out of turns"
    if not any(s.call is not None and s.call.name == FINISH for s in tool_steps(trajectory.steps)):
        return "never called finish"
    if trajectory.errors:
        return "tool calls failed"
    feedback = trajectory.verdict.feedback if trajectory.verdict else "wrong result"
    return re.sub(r"-?\d+(\.\d+)?", "N", re.sub(r"'[^']*'", "'...'", feedback))[:80]


def validate(
    env: Env, params: Any, known: Collection[str], ceiling: int, target: int = 1
) -> Task | str:
    """Turn proposed ``params`` into a training task, or say why not.

    Args:
        env: The env (must have ``task_from_params``).
        params: The proposal.
        known: Problem keys already practised or proposed.
        ceiling: The highest difficulty the task may have.
        target: The difficulty asked for (recorded when the env sets none).

    The env's oracle is not asked: whether the task can be solved is for practice to show.

    Returns:
        The task, or the reason for rejecting it: ``invalid params``, ``probe or test
        problem``, ``duplicate``, ``too hard``, ``null policy passes`` or ``forged claim
        passes``.
    """
    build = task_builder(env)
    if build is None or not isinstance(params, dict):
        return "invalid params"
    try:
        jsonschema.validate(params, params_schema_of(env))
        spec = build(params)
    except (jsonschema.ValidationError, ValueError, TypeError, KeyError):
        return "invalid params"
    digest = hashlib.sha256(json.dumps(spec.params, sort_keys=True, default=str).encode())
    task = make_task(
        env.name,
        spec,
        difficulty=target,
        seed=int(digest.hexdigest()[:8], 16),
        problem_key=problem_key_of(env),
        split=split_of_params(env, spec.params),
    )
    if task.split != "train":
        return "probe or test problem"
    if task.problem in known:
        return "duplicate"
    if task.difficulty > ceiling:
        return "too hard"
    for answer, reason in (("", "null policy passes"), (FORGED_CLAIM, "forged claim passes")):
        try:
            passed = replay(env, task, [_finish(answer)]).passed
        except Exception:  # a proposal that breaks the env is not a task
            passed = True
        if passed:
            return reason
    return task


def _finish(answer: str) -> ToolCall:
    return ToolCall(FINISH, {"answer": answer})
