"""What a report is made of: a run directory read once into plain records, and the analyses.

Everything here is pure data work (no HTML, no charts), so it can be tested and reused on its
own: the learning curve's points, the attribution of the gain to accepted versions, the
before/after breakdowns by family and difficulty, and the flips between base and final.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet.core.agent import AGENT_FILE, Agent
from ratchet.core.serialise import from_dict
from ratchet.core.trajectory import Trajectory
from ratchet.engine.metrics import Metrics, summarize
from ratchet.engine.store import DB_NAME, Run, Store
from ratchet.improve.gate import is_retest
from ratchet.improve.rundir import AGENTS_DIR, SUMMARY_FILE

Stored = tuple[int, Trajectory]


class ReportError(ValueError):
    """A directory cannot be reported on (no store, unfinished run, malformed summary)."""


@dataclass(frozen=True)
class ImproveRun:
    """An improvement run as the report needs it.

    Attributes:
        root: The run directory.
        summary: ``summary.json``'s content.
        agents: The agent of every version that has a directory, by version id.
        test: Stored test episodes per agent version (base, final, and every tested version).
        probe_pass: Probe pass@1 per version that played the probe split.
    """

    root: Path
    summary: dict[str, Any]
    agents: dict[str, Agent]
    test: dict[str, list[Stored]]
    probe_pass: dict[str, float]

    @property
    def base(self) -> dict[str, Any]:
        """The base agent's headline test metrics."""
        return dict(self.summary["base"])

    @property
    def final(self) -> dict[str, Any]:
        """The final agent's headline test metrics."""
        return dict(self.summary["final"])

    @property
    def final_version(self) -> str:
        """The final agent's version id."""
        return str(self.summary["final_version"])

    @property
    def k(self) -> int:
        """Samples per test task."""
        return int(self.summary["base"].get("k", 1))


@dataclass(frozen=True)
class EvalRun:
    """One evaluation run in a store.

    Attributes:
        run: The store's record of it.
        trajectories: Its stored episodes.
        k: Samples per task.
    """

    run: Run
    trajectories: list[Stored]
    k: int


@dataclass(frozen=True)
class CurvePoint:
    """The incumbent after a round (round 0: the base agent before any learning).

    Attributes:
        round: Round number.
        version: The incumbent after the round.
        tokens: Tokens spent on training and probing up to the end of this round.
        seconds: Wall time of the rounds up to the end of this one.
        probe: Probe pass@1 of the incumbent, if measured.
        test: Test pass@1 of the incumbent, if measured.
        test_ci: The test pass@1's 95% interval, if measured.
        accepted: The lever that produced a new incumbent in this round, if any.
    """

    round: int
    version: str
    tokens: int
    seconds: float
    probe: float | None
    test: float | None
    test_ci: tuple[float, float] | None
    accepted: str | None


@dataclass(frozen=True)
class Attribution:
    """One accepted step on the final agent's lineage and its share of the total gain.

    Attributes:
        version: The accepted version.
        parent: The version it improved on.
        lever: The lever that produced it.
        round: The round it was accepted in.
        probe_gain: Its gain on the probe split, as the gate measured it.
        test_before: Parent's test pass@1, if measured.
        test_after: Its own test pass@1, if measured.
        share: Its share of the total gain (test gains if every step was tested, else probe).
        change: What it changed, in words.
    """

    version: str
    parent: str
    lever: str
    round: int
    probe_gain: float
    test_before: float | None
    test_after: float | None
    share: float | None
    change: str


@dataclass(frozen=True)
class LeverGain:
    """What one lever of the run proposed and what of it was kept.

    Attributes:
        lever: The lever's name.
        proposed: Candidates it proposed (rounds where it had nothing are not counted).
        accepted: Its candidates adopted on the final agent's lineage.
        probe_gain: Sum of the probe gains of those candidates.
        test_gain: Sum of their test gains (``None`` if one of them was not tested).
    """

    lever: str
    proposed: int
    accepted: int
    probe_gain: float
    test_gain: float | None


@dataclass(frozen=True)
class Breakdown:
    """Base and final test metrics of one group of tasks (a family or a difficulty).

    Attributes:
        group: The family name or difficulty level.
        tasks: Test tasks in the group.
        base: Base pass@1.
        final: Final pass@1.
    """

    group: str
    tasks: int
    base: float
    final: float


@dataclass(frozen=True)
class Flip:
    """A test episode whose outcome changed between base and final (paired by task and sample).

    Attributes:
        base_id: Stored id of the base agent's episode.
        final_id: Stored id of the final agent's episode.
        trajectory: The final agent's episode (for the task's facts).
        fixed: ``True`` for fail->pass, ``False`` for pass->fail.
    """

    base_id: int
    final_id: int
    trajectory: Trajectory
    fixed: bool


def is_improve_run(root: Path) -> bool:
    """Whether ``root`` holds a finished improvement run (a ``summary.json``)."""
    return (root / SUMMARY_FILE).is_file()


def load_improve(root: Path) -> ImproveRun:
    """Read an improvement run directory.

    Raises:
        ReportError: If ``summary.json`` or the store is missing or malformed.
    """
    try:
        summary = json.loads((root / SUMMARY_FILE).read_text())
        # Fail here with a clear message rather than deep inside a page.
        missing = [
            key
            for key in ("env", "base", "final", "final_version", "rounds", "run_id")
            if key not in summary
        ]
        if missing:
            raise KeyError(", ".join(missing))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ReportError(f"{root / SUMMARY_FILE} is not a ratchet run summary: {exc}") from None
    if not (root / DB_NAME).is_file():
        raise ReportError(f"{root} has a summary but no {DB_NAME}; copy the whole run directory")
    agents = _load_agents(root / AGENTS_DIR)
    with Store(root, create=False) as store:
        run_id = str(summary["run_id"])
        test: dict[str, list[Stored]] = defaultdict(list)
        for stored in store.trajectories(run_id, split="test"):
            test[stored[1].agent].append(stored)
        probe: dict[str, list[Trajectory]] = defaultdict(list)
        for _, trajectory in store.trajectories(run_id, split="probe"):
            if not is_retest(trajectory):
                probe[trajectory.agent].append(trajectory)
    probe_pass = {v: sum(t.passed for t in ts) / len(ts) for v, ts in probe.items()}
    return ImproveRun(root, summary, agents, dict(test), probe_pass)


def load_evals(root: Path) -> list[EvalRun]:
    """Read every evaluation run in the store at ``root``, oldest first.

    Raises:
        ReportError: If ``root`` holds no store, or a store without runs.
    """
    if not (root / DB_NAME).is_file():
        raise ReportError(
            f"{root} is not a ratchet run directory: it has neither {SUMMARY_FILE} nor {DB_NAME}"
        )
    with Store(root, create=False) as store:
        runs = store.runs()
        if not runs:
            raise ReportError(f"the store in {root} holds no runs")
        if any(run.kind == "improve" for run in runs) and not any(r.kind == "eval" for r in runs):
            raise ReportError(
                f"{root} holds an improvement run without {SUMMARY_FILE}: it has not finished; "
                "resume it with `ratchet improve --resume` first"
            )
        chosen = [run for run in runs if run.kind == "eval"] or runs
        loaded = []
        for run in chosen:
            trajectories = store.trajectories(run.id)
            loaded.append(EvalRun(run, trajectories, _samples_per_task(run, trajectories)))
    return loaded


def _samples_per_task(run: Run, trajectories: Sequence[Stored]) -> int:
    configured = run.config.get("k")
    if isinstance(configured, int) and configured > 0:
        return configured
    per_task: dict[tuple[str, str], int] = defaultdict(int)
    for _, trajectory in trajectories:
        per_task[(trajectory.agent, trajectory.task.id)] += 1
    return max(per_task.values(), default=1)


def _load_agents(directory: Path) -> dict[str, Agent]:
    agents: dict[str, Agent] = {}
    if not directory.is_dir():
        return agents
    for file in sorted(directory.glob(f"*/{AGENT_FILE}")):
        try:
            agent = from_dict(Agent, json.loads(file.read_text()))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue  # a damaged agent file costs its details in the report, not the report
        agents[agent.version] = agent
    return agents


def tested_versions(data: ImproveRun) -> dict[str, dict[str, Any]]:
    """Return the test metrics of every version measured on the test split, by version."""
    measured: dict[str, dict[str, Any]] = {"base": data.base}
    for record in data.summary["rounds"]:
        if "test" in record:
            measured[str(record["incumbent"])] = dict(record["test"])
    measured[data.final_version] = data.final
    return measured


def curve(data: ImproveRun) -> list[CurvePoint]:
    """Return the learning curve: the base point, then the incumbent after every round."""
    tests = tested_versions(data)

    def test_of(version: str) -> tuple[float | None, tuple[float, float] | None]:
        metrics = tests.get(version)
        if metrics is None:
            return None, None
        low, high = metrics.get("ci95", (metrics["pass@1"], metrics["pass@1"]))
        return float(metrics["pass@1"]), (float(low), float(high))

    base_test, base_ci = test_of("base")
    points = [CurvePoint(0, "base", 0, 0.0, data.probe_pass.get("base"), base_test, base_ci, None)]
    tokens, seconds, incumbent = 0, 0.0, "base"
    for record in data.summary["rounds"]:
        tokens += int(record.get("tokens", 0))
        seconds += float(record.get("seconds", 0.0))
        version = str(record["incumbent"])
        accepted = None
        if version != incumbent:
            accepted = next(
                (str(c["lever"]) for c in record["candidates"] if c.get("version") == version),
                "?",
            )
        probe = record.get("probe", data.probe_pass.get(version))
        test, ci = test_of(version)
        points.append(
            CurvePoint(int(record["round"]), version, tokens, seconds, probe, test, ci, accepted)
        )
        incumbent = version
    return points


def attribution(data: ImproveRun) -> list[Attribution]:
    """Split the total gain among the accepted versions on the final agent's lineage.

    With every step tested (the default), a step's share is its own test gain over the total
    test gain, and the shares sum to one. Otherwise the probe gains are shared out instead.
    """
    tests = tested_versions(data)
    steps: list[tuple[str, str, int, dict[str, Any]]] = []
    incumbent = "base"
    for record in data.summary["rounds"]:
        version = str(record["incumbent"])
        if version != incumbent:
            numbers = next(c for c in record["candidates"] if c.get("version") == version)
            steps.append((version, incumbent, int(record["round"]), numbers))
            incumbent = version
    all_tested = all(v in tests and p in tests for v, p, _, _ in steps)
    total_test = data.final["pass@1"] - data.base["pass@1"]
    total_probe = sum(float(n.get("probe_gain", 0.0)) for _, _, _, n in steps)
    rows = []
    for version, parent, number, numbers in steps:
        before = tests[parent]["pass@1"] if parent in tests else None
        after = tests[version]["pass@1"] if version in tests else None
        probe_gain = float(numbers.get("probe_gain", 0.0))
        share: float | None = None
        if all_tested and before is not None and after is not None and total_test:
            share = (after - before) / total_test
        elif not all_tested and total_probe:
            share = probe_gain / total_probe
        rows.append(
            Attribution(
                version=version,
                parent=parent,
                lever=str(numbers["lever"]),
                round=number,
                probe_gain=probe_gain,
                test_before=before,
                test_after=after,
                share=share,
                change=describe_change(data.agents.get(parent), data.agents.get(version)),
            )
        )
    return rows


def lever_gains(data: ImproveRun, steps: Sequence[Attribution]) -> list[LeverGain]:
    """Each lever of the run, in the order it proposed, with its accepted gains in ``steps``."""
    proposed: dict[str, int] = {lever: 0 for lever in data.summary.get("levers", [])}
    for record in data.summary["rounds"]:
        for candidate in record["candidates"]:
            proposed.setdefault(str(candidate["lever"]), 0)
            proposed[str(candidate["lever"])] += candidate.get("version") is not None
    gains = []
    for lever, count in proposed.items():
        mine = [s for s in steps if s.lever == lever]
        tested = all(s.test_after is not None and s.test_before is not None for s in mine)
        test_gain = (
            sum((s.test_after or 0.0) - (s.test_before or 0.0) for s in mine) if tested else None
        )
        probe_gain = sum(s.probe_gain for s in mine)
        gains.append(LeverGain(lever, count, len(mine), probe_gain, test_gain))
    return gains


def describe_change(parent: Agent | None, child: Agent | None) -> str:
    """Say in a few words what a version changed compared with its parent."""
    if child is None:
        return "agent directory missing"
    before = parent or Agent()
    changes = []
    if child.exemplars != before.exemplars:
        changes.append(f"{len(child.exemplars)} demonstrations (was {len(before.exemplars)})")
    if child.insights != before.insights:
        changes.append(f"{len(child.insights)} insight rules (was {len(before.insights)})")
    if child.adapter != before.adapter:
        changes.append("a LoRA adapter" if child.adapter else "no LoRA adapter")
    if child.system_prompt != before.system_prompt:
        changes.append("a new system prompt")
    if child.guidance != before.guidance:
        changes.append(f"new guidance for {', '.join(sorted(child.guidance)) or 'no env'}")
    if child.skills != before.skills:
        names = ", ".join(s.name for s in child.skills[:3]) + (
            ", ..." if len(child.skills) > 3 else ""
        )
        changes.append(f"{len(child.skills)} skills (was {len(before.skills)}): {names}")
    return "; ".join(changes) or "settings only"


def breakdown(
    base: Sequence[Stored], final: Sequence[Stored], k: int, key: Callable[[Trajectory], str]
) -> list[Breakdown]:
    """Return base and final pass@1 per group of test tasks (``key`` names a task's group)."""
    groups: dict[str, tuple[list[Trajectory], list[Trajectory]]] = defaultdict(lambda: ([], []))
    for _, trajectory in base:
        groups[key(trajectory)][0].append(trajectory)
    for _, trajectory in final:
        groups[key(trajectory)][1].append(trajectory)
    rows = []
    for group in sorted(groups, key=_natural):
        before, after = (summarize(ts, k, per_difficulty=False) for ts in groups[group])
        rows.append(Breakdown(group, max(before.n, after.n), before.pass_at_1, after.pass_at_1))
    return rows


def _natural(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (1 << 30, text)


def flips(base: Sequence[Stored], final: Sequence[Stored]) -> list[Flip]:
    """Return the test episodes whose outcome differs between base and final.

    Episodes pair up by ``(task, sample)``, as in the gate: both agents played the same test
    tasks with the same sampling seeds.
    """
    before = {(t.task.id, t.sample): (i, t) for i, t in base}
    found = []
    for final_id, trajectory in final:
        paired = before.get((trajectory.task.id, trajectory.sample))
        if paired is not None and paired[1].passed != trajectory.passed:
            found.append(Flip(paired[0], final_id, trajectory, fixed=trajectory.passed))
    return sorted(found, key=lambda f: (f.trajectory.task.family, f.trajectory.task.difficulty))


def eval_metrics(run: EvalRun) -> dict[str, Metrics]:
    """Return the metrics of every agent in an evaluation run, by agent version."""
    by_agent: dict[str, list[Trajectory]] = defaultdict(list)
    for _, trajectory in run.trajectories:
        by_agent[trajectory.agent].append(trajectory)
    return {agent: summarize(ts, run.k) for agent, ts in by_agent.items()}
