"""Behaviour cloning from another source's demonstrations: privileged, and marked so.

The AgentGym recipe: imitate demonstrations first, then self-improve. The demonstrations come
from outside the agent's own experience, so a gain they bring is *not* self-improvement; the
candidate's notes carry ``privileged`` (with the source), which the run directory copies into
the lineage and the summary, and the report shows such gains apart.

Sources (``source``):

- ``oracle``: the env's own solution of each training task the agent practised, replayed
  through the env's verifier;
- ``teacher``: the run's reflector model (``--reflector``, any backend) playing those tasks;
- a path to a JSONL file written by ``ratchet export`` (or
  :func:`ratchet.engine.export.write_jsonl`): each line's calls are replayed on its task in
  this env and kept only if the verifier passes.

Only ``train``-split problems are ever used: a demonstration's split is recomputed from its
params (the env's own key function, and a fixed pool's own splits; the split recorded in a
file is not trusted), so no probe or test problem can reach training. Kept demonstrations are
written to ``demos.jsonl`` in the candidate's directory, for audit. The adapter is trained
like ``rft``'s (a fresh one on the base weights), on the demonstrations plus the agent's own
verified successes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ratchet.core.agent import Agent
from ratchet.core.env import Env, split_of_params
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.export import read_jsonl, write_jsonl
from ratchet.engine.harness import replay
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.improve.hindsight import lessons
from ratchet.improve.levers.base import LeverContext, NoCandidate
from ratchet.improve.levers.weights import (
    ADAPTER_DIR,
    adapter_candidate,
    lora_settings,
    played,
    refuse_bad_depth,
    trainer_of,
)

DEMOS_FILE = "demos.jsonl"
SOURCES = ("oracle", "teacher")


def admissible(env: Env, task: Task) -> bool:
    """Whether ``task`` is a train-split problem of ``env``, judged from its params.

    See :func:`~ratchet.core.env.split_of_params`: a fixed pool's own split for its problems.
    """
    if task.env != env.name or task.split != "train":
        return False
    return split_of_params(env, task.params) == "train"


def from_oracle(env: Env, tasks: Sequence[Task], agent: Agent) -> list[Trajectory]:
    """The env's solutions of ``tasks``, replayed and verified (failed replays dropped)."""
    found = []
    for task in tasks:
        try:
            calls = env.oracle(task)
        except Exception:  # a broken oracle costs one demonstration, not the run
            continue
        found.append(replace(replay(env, task, calls, agent), agent="oracle"))
    return found


def from_teacher(context: LeverContext, tasks: Sequence[Task]) -> list[Trajectory]:
    """The reflector model's episodes on ``tasks``, with the incumbent's prompt and turns.

    Raises:
        ValueError: If the run has no reflector (the teacher) model.
    """
    if context.reflector is None:
        raise ValueError("demos from a teacher need a teacher model: pass --reflector MODEL")
    teacher = replace(
        context.incumbent,
        version="teacher",
        model=context.reflector.name,
        adapter=None,
        exemplars=(),
        insights=(),
    )
    return rollout(
        context.env, tasks, teacher, context.reflector, RolloutConfig(), seed=context.seed
    )


def from_file(env: Env, path: Path, agent: Agent) -> list[Trajectory]:
    """Each imported episode's calls replayed on its task here (only verified replays count).

    Raises:
        ValueError: If the file is missing or not a Ratchet JSONL export.
    """
    if not path.is_file():
        raise ValueError(
            f"demos source {str(path)!r} is neither {' nor '.join(SOURCES)} nor a JSONL file"
        )
    found = []
    for episode in read_jsonl(path):
        if admissible(env, episode.task) and episode.calls:
            found.append(replace(replay(env, episode.task, episode.calls, agent), agent="import"))
    return found


@dataclass(frozen=True)
class DemosLever:
    """Propose an adapter trained on outside demonstrations (privileged; see the module).

    Attributes:
        source: ``oracle``, ``teacher`` (the reflector model) or a path to a JSONL export.
        steps: Optimiser steps per proposal.
        batch_size: Sequences per step.
        learning_rate: AdamW learning rate for the adapter.
        lora_rank: LoRA rank (alpha is twice the rank).
        lora_depth: Share of the decoder layers, from the top, the adapter is put on.
        max_demos: Most training tasks demonstrated (the newest).
        with_own: Train on the agent's own verified successes too.
    """

    source: str = "oracle"
    steps: int = 30
    batch_size: int = 4
    learning_rate: float = 1e-3
    lora_rank: int = 16
    lora_depth: float = 1.0
    max_demos: int = 256
    with_own: bool = True
    name: str = "demos"

    def __post_init__(self) -> None:
        """Refuse a LoRA depth outside ``(0, 1]``.

        Raises:
            ValueError: Naming the lever option.
        """
        refuse_bad_depth(self)

    def propose(self, context: LeverContext) -> Agent | None:
        """Train on the verified demonstrations and return the candidate (``None`` if none).

        Raises:
            ValueError: If the weights cannot be trained, the source is unusable, or a
                teacher is asked for without a reflector model.
        """
        trainer = trainer_of(context, self.name)
        env = context.env
        practised = {t.task.id: t.task for t in context.experience if played(context, t)}
        tasks = [t for t in practised.values() if admissible(env, t)][-self.max_demos :]
        if self.source == "oracle":
            found = from_oracle(env, tasks, context.incumbent)
        elif self.source == "teacher":
            found = from_teacher(context, tasks)
        else:
            found = from_file(env, Path(self.source).expanduser(), context.incumbent)
        demos = [t for t in found if t.passed and admissible(env, t.task)][-self.max_demos :]
        if not demos:
            raise NoCandidate(f"no passing demonstration from {self.source} on practised tasks")
        write_jsonl(demos, context.workdir / DEMOS_FILE)
        own = [t for t in lessons(context.experience) if t.task.env == env.name]
        settings = lora_settings(self, context.seed)
        examples = [*demos, *(own if self.with_own else [])]
        out = context.workdir / ADAPTER_DIR
        result = trainer.sft(examples, out, settings, context.progress)
        privileged = {"source": self.source, "demos": len(demos), "file": DEMOS_FILE}
        return adapter_candidate(context, self.name, result, privileged=privileged)
