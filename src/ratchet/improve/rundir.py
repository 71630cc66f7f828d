"""The run directory: everything an improvement run keeps on disk, and nothing else does.

Layout::

    RUN/
      ratchet.db       the store: every episode, agent version (lineage) and gate decision
      agents/base/     one directory per agent version (agent.json and any adapter)
      agents/v1/ ...
      state.json       the loop's progress: rounds done, incumbent, each round's tasks
      summary.json     written when the run ends
      report/          the HTML report

Episodes go to the store the moment they finish, candidates appear as whole directories
(written beside their final place and renamed into it), and the loop's progress is rewritten
atomically after each step, so a run killed at any point resumes where it stopped. Version
numbers are given only to candidates a lever actually proposed, so they are contiguous.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ratchet.core.agent import Agent, load_agent
from ratchet.core.serialise import RecordError, from_dict, to_dict
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.store import DB_NAME, Store
from ratchet.improve.config import ImproveConfig
from ratchet.improve.gate import GateDecision, is_retest, spent_alpha
from ratchet.improve.levers.base import NoCandidate
from ratchet.improve.schedule import SitsOut

STATE_FILE = "state.json"
SUMMARY_FILE = "summary.json"
AGENTS_DIR = "agents"

Propose = Callable[[Path, str], Agent | None]
"""``propose(workdir, version) -> Agent | None``: a lever's proposal into a fresh directory."""


class RunDir:
    """One improvement run's directory; use :meth:`open`.

    Attributes:
        root: The run directory.
        config: The run's settings.
        store: The run's store.
        run_id: The run's id in the store.
        experience: Training episodes so far (explored and relabelled), oldest first.
    """

    def __init__(self, root: Path, config: ImproveConfig, store: Store, run_id: str) -> None:
        self.root = root
        self.config = config
        self.store = store
        self.run_id = run_id
        self._state: dict[str, Any] = {}
        if (root / STATE_FILE).exists():
            self._state = json.loads((root / STATE_FILE).read_text())
        imported = self._state.get("imported")
        self.experience: list[Trajectory] = [
            t for _, t in store.trajectories(imported, split="train") if imported is not None
        ] + [t for _, t in store.trajectories(run_id, split="train")]
        self._state.setdefault("incumbent", "base")
        self._state.setdefault("rounds", [])
        self._state.setdefault("round_tasks", {})
        self._state.setdefault("candidates", {})
        self._state.setdefault("tests", {})
        self._state.setdefault("proposed_tasks", [])
        self._state.setdefault("proposals", {})
        self._state.setdefault("tokens", sum(t.tokens for _, t in store.trajectories(run_id)))
        self._state.setdefault("seconds", 0.0)
        self._state.setdefault("model_errors", {"count": 0, "first": None})
        self._mark = (time.perf_counter(), self._state["seconds"], self._state["tokens"])
        self._save()

    @classmethod
    @contextmanager
    def open(
        cls, root: Path, config: ImproveConfig, *, resume: bool, log: Callable[[str], None]
    ) -> Iterator[RunDir]:
        """Start a run in ``root`` (or resume the one there) and close its store on exit.

        A directory whose run stored no episode (a start that failed) is started afresh.

        Raises:
            ValueError: If ``root`` holds a run with episodes and ``resume`` is false, holds no
                run and ``resume`` is true, or holds a run with other settings.
            StoreError: If the store cannot be opened.
        """
        root.mkdir(parents=True, exist_ok=True)
        store = Store(root)
        try:
            existing = store.runs(kind="improve")
            if existing and not resume and store.trajectories(existing[0].id, limit=1):
                raise ValueError(
                    f"{root} already holds a run; pass --resume to continue it or pick --out"
                )
            if existing and not resume:
                log(f"{root} holds a run that never stored an episode; starting afresh")
                store.close()
                _clear(root)
                store = Store(root)
                existing = []
            run_id = (
                _resume(store, existing[0].id if existing else "", config, root) if resume else ""
            )
            if not resume:
                run_id = store.start_run("improve", to_dict(config))
            run = cls(root, config, store, run_id)
            if resume:
                log(f"resuming run {run_id} after round {run.rounds_done}")
            run._save_base()
            yield run
        finally:
            store.close()

    # --- agents -----------------------------------------------------------------------------

    def agent_dir(self, version: str) -> Path:
        """Return the directory of agent ``version``."""
        return self.root / AGENTS_DIR / version

    def agent(self, version: str) -> Agent:
        """Load agent ``version`` from its directory."""
        return load_agent(str(self.agent_dir(version)))[0]

    def privileged(self, version: str) -> dict[str, Any]:
        """``{"privileged": ...}`` if ``version`` learned from outside demonstrations, else ``{}``.

        The mark is the lever's (see :mod:`ratchet.improve.levers.demos`); it goes wherever the
        version is recorded, so no report can count its gain as self-improvement.
        """
        mark = self.agent(version).notes.get("privileged")
        return {} if mark is None else {"privileged": mark}

    def lineage(self, version: str) -> list[Agent]:
        """``version`` and its ancestors, base first."""
        chain = [self.agent(version)]
        while chain[-1].parent is not None:
            chain.append(self.agent(chain[-1].parent))
        return chain[::-1]

    def incumbent(self) -> Agent:
        """The current incumbent."""
        return self.agent(self._state["incumbent"])

    def candidate(
        self, number: int, lever: str, incumbent: Agent, propose: Propose
    ) -> Agent | None:
        """Return ``lever``'s candidate for round ``number``, proposing it only once.

        The proposal is written to a scratch directory and renamed into ``agents/VERSION``
        whole; a lever that proposes nothing uses up no version number. A candidate that keeps
        the incumbent's adapter points to it by a relative path, so the run directory can move.
        """
        key = f"{number}:{lever}"
        if key in self._state["candidates"]:
            version = self._state["candidates"][key]
            return None if version is None else self.agent(version)
        version = f"v{sum(v is not None for v in self._state['candidates'].values()) + 1}"
        final = self.agent_dir(version)
        workdir = final.parent / f".{version}.partial"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        try:
            candidate = propose(workdir, version)
        except NoCandidate as exc:
            candidate = None
            reason = str(exc) if isinstance(exc, SitsOut) else f"nothing to propose: {exc}"
            self._state.setdefault("no_candidate", {})[key] = reason
        if candidate is not None:
            inherited = incumbent.adapter_path(self.agent_dir(incumbent.version))
            own = candidate.adapter_path(workdir)
            trained = own is not None and own.is_dir() and own.resolve().parent == workdir.resolve()
            # A new adapter may bear the incumbent's adapter's name; only one not in the
            # candidate's own directory is the incumbent's.
            if candidate.adapter == incumbent.adapter and inherited is not None and not trained:
                candidate = replace(candidate, adapter=os.path.relpath(inherited, final))
            candidate = replace(candidate, notes={**candidate.notes, "round": number})
            candidate.save(workdir)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(workdir, final)  # the directory appears whole or not at all
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        self._state["candidates"][key] = candidate.version if candidate else None
        self._save()
        return candidate

    def adopt(self, number: int, incumbent: Agent, decisions: Sequence[GateDecision]) -> None:
        """Record round ``number``'s gate decisions and lineage; make the winner incumbent."""
        levers = {v: k.split(":", 1)[1] for k, v in self._state["candidates"].items() if v}
        recorded = {(d.round, d.candidate) for d in self.store.decisions(self.run_id)}
        for decision in decisions:
            if (number, decision.candidate) in recorded:
                continue
            lever = levers[decision.candidate]
            numbers = {**to_dict(decision), **self.privileged(decision.candidate)}
            self.store.add_decision(
                self.run_id,
                round=number,
                lever=lever,
                candidate=decision.candidate,
                incumbent=incumbent.version,
                accepted=decision.accepted,
                numbers=numbers,
            )
            self.store.add_agent_version(
                decision.candidate,
                parent=incumbent.version,
                lever=lever,
                path=self.agent_dir(decision.candidate),
                metadata={"round": number, **numbers},
            )

    # --- episodes ---------------------------------------------------------------------------

    def done(self, agent: str) -> set[tuple[str, int]]:
        """The ``(task_id, sample)`` pairs ``agent`` has already played in this run."""
        return self.store.done_keys(self.run_id, agent)

    def record(self, trajectories: Sequence[Trajectory]) -> None:
        """Store finished episodes; training ones join :attr:`experience`."""
        self.store.add_trajectories(self.run_id, trajectories)
        self.experience.extend(t for t in trajectories if t.task.split == "train")
        self._state["tokens"] += sum(t.tokens for t in trajectories)
        errors = self._state["model_errors"]
        for trajectory in trajectories:
            if trajectory.error is not None and trajectory.error.startswith("model error"):
                errors["count"] += 1
                errors["first"] = errors["first"] or trajectory.error

    def import_experience(self, source: str, load: Callable[[], list[Trajectory]]) -> int:
        """Add the verified episodes ``load`` returns to the experience, once per run.

        They are kept in the run's store as a run of kind ``experience`` (so a resumed run
        has them without reading ``source`` again); returns how many there are.
        """
        if "imported" in self._state:
            return self.store.count_trajectories(self._state["imported"])
        found = load()
        imported = self.store.start_run("experience", {"source": source, "episodes": len(found)})
        self.store.add_trajectories(imported, found)
        self.store.finish_run(imported, "done")
        self._state["imported"] = imported
        self._save()
        self.experience[:0] = found
        return len(found)

    def probe_episodes(self, agent: str) -> list[Trajectory]:
        """Every probe episode ``agent`` played in this run (the curriculum reads its mastery).

        Retest episodes (see :mod:`ratchet.improve.gate`) are left out: they replay only the
        tasks a candidate lost, so they would tilt the incumbent's mastery.
        """
        stored = self.store.trajectories(self.run_id, agent=agent, split="probe")
        return [t for _, t in stored if not is_retest(t)]

    def episodes(self, agent: str, tasks: Sequence[Task], samples: range) -> list[Trajectory]:
        """The stored episodes of ``agent`` on ``tasks`` with sample numbers in ``samples``."""
        ids = {t.id for t in tasks}
        stored = self.store.trajectories(self.run_id, agent=agent, task_ids=ids)
        return [t for _, t in stored if t.sample in samples]

    def offer_tasks(
        self, number: int, lever: str, tasks: Sequence[Task], rejected: Mapping[str, int]
    ) -> None:
        """Keep training tasks a lever proposed (for the curriculum) and what it turned away."""
        known = {t["id"] for t in self._state["proposed_tasks"]}
        fresh = [t for t in tasks if t.split == "train" and t.id not in known]
        self._state["proposed_tasks"].extend(to_dict(t) for t in fresh)
        self._state["proposals"][f"{number}:{lever}"] = {
            "accepted": len(fresh),
            "rejected": dict(sorted(rejected.items())),
        }
        self._save()

    @property
    def proposed_tasks(self) -> list[Task]:
        """Training tasks proposed by levers so far, oldest first."""
        return [from_dict(Task, t) for t in self._state["proposed_tasks"]]

    # --- progress ---------------------------------------------------------------------------

    @property
    def rounds_done(self) -> int:
        """Rounds completed."""
        return len(self._state["rounds"])

    @property
    def rounds(self) -> list[dict[str, Any]]:
        """The records of the completed rounds."""
        return list(self._state["rounds"])

    @property
    def alpha_spent(self) -> float:
        """The gate's false-accept budget the completed rounds spent between them."""
        return sum(spent_alpha(record) for record in self._state["rounds"])

    @property
    def model_errors(self) -> dict[str, Any]:
        """How many episodes ended on a model error, and the first such error."""
        return dict(self._state["model_errors"])

    @property
    def tokens(self) -> int:
        """Tokens read and generated by every episode of the run so far."""
        return int(self._state["tokens"])

    def round_tasks(
        self, number: int, choose: Callable[[], tuple[list[Task], dict[str, Any]]]
    ) -> tuple[list[Task], dict[str, Any]]:
        """Round ``number``'s training tasks and the curriculum's note on them.

        ``choose()`` runs once; a resumed run gets the same tasks and note back.
        """
        saved = self._state["round_tasks"]
        if str(number) not in saved:
            tasks, note = choose()
            saved[str(number)] = {"tasks": [to_dict(t) for t in tasks], "note": note}
            self._save()
        chosen = saved[str(number)]
        if isinstance(chosen, list):  # saved before the curriculum kept notes
            chosen = {"tasks": chosen, "note": {}}
        return [from_dict(Task, t) for t in chosen["tasks"]], dict(chosen["note"])

    def end_round(self, record: dict[str, Any]) -> dict[str, Any]:
        """Close a round: keep its record (completed with its levers and cost) and incumbent.

        Returns the completed record.
        """
        number = record["round"]
        decisions = {d["candidate"]: d for d in record.pop("decisions")}
        candidates = []
        nothing = self._state.get("no_candidate", {})
        for key, version in self._state["candidates"].items():
            round_of, lever = key.split(":", 1)
            if round_of != str(number):
                continue
            if version is None:
                reason = nothing.get(key, "nothing to propose")
                outcome = {"version": None, "accepted": False, "reason": reason}
            else:
                outcome = {"version": version, **decisions[version], **self.privileged(version)}
            candidates.append({"lever": lever, **outcome})
        proposals = {
            key.split(":", 1)[1]: counts
            for key, counts in self._state["proposals"].items()
            if key.split(":", 1)[0] == str(number)
        }
        _, _, tokens = self._mark
        record = {
            **record,
            "candidates": candidates,
            **({"proposed_tasks": proposals} if proposals else {}),
            "seconds": self._elapsed(),
            "tokens": self._state["tokens"] - tokens,
        }
        self._state["incumbent"] = record["incumbent"]
        self._state["rounds"].append(record)
        self._state["seconds"] = self.seconds
        self._mark = (time.perf_counter(), self._state["seconds"], self._state["tokens"])
        self._save()
        return record

    @property
    def seconds(self) -> float:
        """Seconds the run has worked, over all its sessions (resumes included)."""
        started, before, _ = self._mark
        return float(before + time.perf_counter() - started)

    def _elapsed(self) -> float:
        started, _, _ = self._mark
        return time.perf_counter() - started

    def episode_count(self) -> int:
        """Episodes stored by the run (hindsight replays included)."""
        return self.store.count_trajectories(self.run_id)

    def tested(self, version: str, metrics: dict[str, Any]) -> None:
        """Keep ``version``'s test metrics (for the learning curve and the summary)."""
        self._state["tests"][version] = metrics
        self._save()

    @property
    def tests(self) -> dict[str, dict[str, Any]]:
        """Test metrics per tested version."""
        return dict(self._state["tests"])

    def finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Write ``summary.json``, mark the run done and return the summary."""
        self._state["seconds"] = summary["seconds"]
        self._save()
        _write_atomic(self.root / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
        self.store.finish_run(self.run_id, "done")
        return summary

    def _save(self) -> None:
        _write_atomic(self.root / STATE_FILE, json.dumps(self._state, indent=2))

    def _save_base(self) -> None:
        if not (self.agent_dir("base") / "agent.json").exists():
            config = self.config
            base = Agent(model=config.model, temperature=config.temperature)
            base = replace(base, max_turns=config.budget().max_turns or base.max_turns)
            base.save(self.agent_dir("base"))
            self.store.add_agent_version(
                "base", parent=None, lever="base", path=self.agent_dir("base")
            )


def _resume(store: Store, run_id: str, config: ImproveConfig, root: Path) -> str:
    if not run_id:
        raise ValueError(f"{root} holds no run to resume")
    try:
        saved = from_dict(ImproveConfig, store.run(run_id).config)
    except RecordError as exc:
        raise ValueError(f"{root} holds a run this version cannot resume: {exc}") from None
    if replace(saved, rounds=config.rounds) != config:
        changed = {
            key: (value, to_dict(config)[key])
            for key, value in to_dict(saved).items()
            if key != "rounds" and to_dict(config)[key] != value
        }
        raise ValueError(
            f"{root} was started with other settings (saved vs now: {changed}); "
            "resume with the same settings (only --rounds may change) or pick --out"
        )
    store.finish_run(run_id, "running")
    return run_id


def _clear(root: Path) -> None:
    for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", STATE_FILE):
        (root / name).unlink(missing_ok=True)
    shutil.rmtree(root / AGENTS_DIR, ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text)
    os.replace(staging, path)
