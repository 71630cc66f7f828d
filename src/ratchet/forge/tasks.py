"""Forging a source's tasks: a survey of its tools, then seeded walks kept as a task pool.

The survey runs random calls of every tool on a few worlds: a tool that changed the state is a
*write* tool, any other a *read* tool, and the tools' schemas must be the same in every world
(a schema that differs lists something of a world the agent has not seen). Then, per difficulty
level ``d``, seeded walks of ``d`` state-changing calls become action tasks, and at level 1 a
share of single reads become questions. Walks that change nothing, undo themselves or repeat a
problem key already kept are dropped and counted. Each task's split is decided by its problem
key (the normalised walk), so the pool's splits are the ones hashing would give.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ratchet.core.pool import TaskPool
from ratchet.core.task import TaskSpec, split_of
from ratchet.core.tool import Tool, ToolCall
from ratchet.engine.models.base import Model
from ratchet.forge.config import ForgeConfig
from ratchet.forge.source import Source
from ratchet.forge.state import Cells, describe_change, scalars
from ratchet.forge.walks import (
    Draw,
    Ran,
    Runner,
    answerable,
    call_dicts,
    judge_walk,
    normalise,
    problem_key,
)
from ratchet.forge.wording import action, check_templates, question, reword, sentence, values_of

SURVEY_WORLDS = 4
SURVEY_CALLS = 24
STEP_TRIES = 12
PATIENCE = 500


@dataclass(frozen=True)
class Survey:
    """What random calls showed about a source's tools.

    Attributes:
        tools: The tools, as world 0 offers them.
        writes: Tools some call of which changed the state.
        reads: Tools that changed nothing and gave a short value (questions ask these).
        worlds: How many worlds' schemas were compared (all of them).
    """

    tools: tuple[Tool, ...]
    writes: tuple[str, ...]
    reads: tuple[str, ...]
    worlds: int


def survey(source: Source[Any], seed: int = 0) -> Survey:
    """Classify the source's tools and check their schemas are the same in every world.

    Raises:
        ValueError: If a tool's schema differs between two worlds, a template does not fit
            its tool, or no call of any tool changed the state or gave an answerable value.
    """
    schemas: str | None = None
    tools: tuple[Tool, ...] = ()
    changed_by: set[str] = set()
    answered_by: set[str] = set()
    for index in range(source.worlds):
        with Runner(source, index) as runner:
            offered = json.dumps([t.schema() for t in runner.tools.values()], sort_keys=True)
            if schemas is None:
                schemas, tools = offered, tuple(runner.tools.values())
                check_templates(source.templates, tools)
            elif offered != schemas:
                raise ValueError(
                    f"{source.name}: the tool schemas of world {index} differ from world 0's; "
                    "a schema that changes with the world lists what the world holds, which the "
                    "agent has not seen. Type closed sets with the vocabulary of values (every "
                    "shelf there can be), not with one world's contents"
                )
            if index < SURVEY_WORLDS:
                _try_tools(
                    source, runner, random.Random(f"{seed}:survey:{index}"), changed_by, answered_by
                )
    writes = tuple(t.name for t in tools if t.name in changed_by)
    reads = tuple(t.name for t in tools if t.name not in changed_by and t.name in answered_by)
    if not writes and not reads:
        raise ValueError(
            f"{source.name}: no random call of any tool changed the state or read a short "
            "value; give `values` for the tools' arguments so walks can draw valid ones"
        )
    return Survey(tools, writes, reads, source.worlds)


def _try_tools(
    source: Source[Any],
    runner: Runner[Any],
    rng: random.Random,
    changed_by: set[str],
    answered_by: set[str],
) -> None:
    draw = Draw(source, runner.world, runner.start)
    for tool in runner.tools.values():
        for _ in range(SURVEY_CALLS):
            ran = runner.run(ToolCall(tool.name, draw.arguments(rng, tool)))
            if ran.changed:
                changed_by.add(tool.name)
            elif ran.error is None and answerable(ran.result):
                answered_by.add(tool.name)


@dataclass
class Counts:
    """What forging the walks came to, for the report.

    Attributes:
        kept: Tasks kept per difficulty level.
        questions: How many of the level-1 tasks are questions.
        dropped: Walks dropped, by reason.
        invalid_calls: Drawn calls that failed (not part of any walk).
        splits: Tasks kept per split.
        reworded: Instructions a model reworded.
        refused: Rewordings refused, by reason.
    """

    kept: dict[int, int] = field(default_factory=dict)
    questions: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    invalid_calls: int = 0
    splits: Counter[str] = field(default_factory=Counter)
    reworded: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        """The counts as JSON."""
        return {
            "kept": {str(level): n for level, n in self.kept.items()},
            "questions": self.questions,
            "dropped": dict(self.dropped),
            "invalid_calls": self.invalid_calls,
            "splits": dict(self.splits),
            "reworded": self.reworded,
            "refused": dict(self.refused),
        }


def action_spec(
    templates: Mapping[str, str],
    tools: Mapping[str, Tool],
    index: int,
    steps: Sequence[Ran],
    calls: Sequence[ToolCall],
) -> TaskSpec:
    """The task of state-changing ``steps`` (normalised as ``calls``) in world ``index``."""
    changes = {_key(s.call): describe_change(s.before, s.after) for s in steps}
    said = [sentence(templates, tools[c.name], c, changes.get(_key(c), "")) for c in calls]
    names = {c.name for c in calls}
    return TaskSpec(
        action(said),
        {"world": index, "calls": call_dicts(calls)},
        family=names.pop() if len(names) == 1 else "mixed",
        difficulty=len(calls),
    )


def question_spec(
    templates: Mapping[str, str], tools: Mapping[str, Tool], index: int, call: ToolCall
) -> TaskSpec:
    """The question a single read ``call`` asks in world ``index``."""
    params = {"world": index, "ask": call_dicts([call])[0]}
    return TaskSpec(question(templates, tools[call.name], call), params, call.name, difficulty=1)


def _key(call: ToolCall) -> str:
    return json.dumps([call.name, call.arguments], sort_keys=True)


@dataclass
class _Forging:
    """One forging run's state: the survey, what is kept, what to reword."""

    source: Source[Any]
    survey: Survey
    config: ForgeConfig
    counts: Counts = field(default_factory=Counts)
    seen: set[str] = field(default_factory=set)
    specs: list[TaskSpec] = field(default_factory=list)
    hidden: list[set[str]] = field(default_factory=list)

    def level(self, level: int) -> None:
        kept, attempts, since_kept = 0, 0, 0
        wanted = self.config.tasks_per_level
        # A level whose distinct problems run out stops once a long run of walks finds none.
        while kept < wanted and attempts < 20 * wanted and since_kept < max(PATIENCE, wanted):
            attempts += 1
            since_kept += 1
            rng = random.Random(f"{self.config.seed}:{level}:{attempts}")
            index = rng.randrange(self.source.worlds)
            asks = level == 1 and self.survey.reads and rng.random() < self.config.question_share
            if asks or not self.survey.writes:
                made = self._question(rng, index) if level == 1 else "no write tools"
            else:
                made = self._action(rng, index, level)
            if isinstance(made, str):
                self.counts.dropped[made] += 1
                continue
            spec, hidden = made
            key = problem_key(spec.params)
            if key in self.seen:
                self.counts.dropped["duplicate problem"] += 1
                continue
            self.seen.add(key)
            self.specs.append(spec)
            self.hidden.append(hidden)
            kept, since_kept = kept + 1, 0
            self.counts.questions += "ask" in spec.params
        self.counts.kept[level] = kept

    def _action(
        self, rng: random.Random, index: int, level: int
    ) -> tuple[TaskSpec, set[str]] | str:
        with Runner(self.source, index) as runner:
            draw = Draw(self.source, runner.world, runner.start)
            steps: list[Ran] = []
            for _ in range(STEP_TRIES * level):
                tool = runner.tools[rng.choice(self.survey.writes)]
                ran = runner.run(ToolCall(tool.name, draw.arguments(rng, tool)))
                if ran.error is not None:
                    self.counts.invalid_calls += 1
                    if ran.changed:
                        return "a failing call changed the state"
                    continue
                if ran.changed:
                    steps.append(ran)
                if len(steps) == level:
                    break
            else:
                return "too few valid calls"
            why = judge_walk(steps, runner.start)
            if why is not None:
                return why
            calls = normalise(self.source, index, steps)
            spec = action_spec(self.source.templates, runner.tools, index, steps, calls)
            return spec, _hidden(runner.start, runner.now)

    def _question(self, rng: random.Random, index: int) -> tuple[TaskSpec, set[str]] | str:
        with Runner(self.source, index) as runner:
            draw = Draw(self.source, runner.world, runner.start)
            for _ in range(STEP_TRIES):
                tool = runner.tools[rng.choice(self.survey.reads)]
                ran = runner.run(ToolCall(tool.name, draw.arguments(rng, tool)))
                if ran.error is None and not ran.changed and answerable(ran.result):
                    spec = question_spec(self.source.templates, runner.tools, index, ran.call)
                    return spec, _hidden(runner.start, runner.now) | {str(ran.result)}
                self.counts.invalid_calls += ran.error is not None
            return "no answerable read"


def _hidden(start: Cells, end: Cells) -> set[str]:
    return scalars(start, ends=False) | scalars(end, ends=False)


def forge_tasks(
    source: Source[Any],
    config: ForgeConfig,
    model: Model | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> tuple[TaskPool, Counts, Survey]:
    """Survey ``source``, walk it, and return the task pool with the counts and the survey.

    With a ``model``, each instruction is reworded and the rewording checked (see
    :mod:`ratchet.forge.wording`).

    Raises:
        ValueError: As :func:`survey`, or if some level kept no task.
    """
    found = survey(source, config.seed)
    log(f"tools: writes {', '.join(found.writes) or '-'}; reads {', '.join(found.reads) or '-'}")
    forging = _Forging(source, found, config)
    for level in range(1, config.max_difficulty + 1):
        forging.level(level)
        log(f"level {level}: {forging.counts.kept[level]} tasks")
        if not forging.counts.kept[level]:
            raise ValueError(
                f"{source.name}: no walk of {level} state-changing calls was kept "
                f"(dropped: {dict(forging.counts.dropped)}); lower --max-difficulty or give "
                "`values` so walks find valid calls"
            )
    specs = forging.specs
    if model is not None:
        specs = _reworded(model, specs, forging.hidden, forging.counts)
    splits: dict[str, list[TaskSpec]] = {"train": [], "probe": [], "test": []}
    for spec in specs:
        split = split_of(problem_key(spec.params))
        splits[split].append(spec)
        forging.counts.splits[split] += 1
    return TaskPool.from_splits(splits), forging.counts, found


def _reworded(
    model: Model, specs: list[TaskSpec], hidden: list[set[str]], counts: Counts
) -> list[TaskSpec]:
    asked = []
    for spec, secret in zip(specs, hidden, strict=True):
        calls = spec.params.get("calls") or [spec.params["ask"]]
        kept = [v for c in calls for v in values_of(ToolCall(c["name"], c["arguments"]))]
        asked.append((spec.instruction, kept, secret))
    out = []
    for spec, rewording in zip(specs, reword(model, asked), strict=True):
        if rewording.refused is None:
            counts.reworded += 1
            out.append(TaskSpec(rewording.text, spec.params, spec.family, spec.difficulty))
        else:
            counts.refused[rewording.refused.split(" '")[0]] += 1
            out.append(spec)
    return out
