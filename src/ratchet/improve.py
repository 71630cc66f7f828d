"""The self-improvement loop behind ``ratchet improve``.

Each round: the curriculum picks training tasks; the incumbent plays them (sampling, k times);
failed episodes are relabelled in hindsight; every lever proposes a candidate from the verified
experience so far; the gate compares each candidate with the incumbent on the fixed probe split
(same tasks, same seeds); the best accepted candidate becomes the new incumbent. Base and final
agents are evaluated on the held-out test split, which no decision ever sees.

Everything lands in one run directory, and a rerun with ``resume=True`` continues where it
stopped: finished episodes are in the store, candidates are directories written atomically,
decisions are recorded, and ``state.json`` says which rounds are complete.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.progress import Progress

from ratchet.agent import Agent, load_agent
from ratchet.curriculum import CurriculumConfig, choose_tasks
from ratchet.env import Env
from ratchet.gate import GateConfig, decide
from ratchet.hindsight import relabel
from ratchet.levers import Lever, LeverContext, make_levers
from ratchet.metrics import Metrics, summarize
from ratchet.models.base import Model, make_model
from ratchet.rollout import RolloutConfig, rollout
from ratchet.store import Store
from ratchet.task import Split, Task
from ratchet.trajectory import Trajectory

STATE_FILE = "state.json"
SUMMARY_FILE = "summary.json"
AGENTS_DIR = "agents"
PROBE_SEED_OFFSET = 1_000
TEST_SEED_OFFSET = 2_000

Backends = Callable[[Agent, Path | None], Model]
Log = Callable[[str], None]


@dataclass(frozen=True)
class ImproveConfig:
    """Settings of one improvement run (saved with it; a resumed run must match).

    Attributes:
        env: Env name.
        model: Model reference of the base agent.
        levers: Levers to try each round, by name.
        rounds: Rounds to run.
        train_tasks: Training tasks per round.
        train_k: Samples per training task (exploration).
        probe_tasks: Size of the fixed probe split the gate uses.
        probe_k: Samples per probe task.
        test_tasks: Size of the held-out test split.
        test_k: Samples per test task.
        max_difficulty: Highest difficulty practised and evaluated (``None``: the env's).
        alpha: Gate significance level (one-sided).
        flip_budget: Gate's share of paired probe episodes that may go from pass to fail.
        temperature: Sampling temperature of the agents (probe and test episodes).
        explore_temperature: Sampling temperature of training episodes. Hotter than the agent's
            own, because what exploration finds is what hindsight relabelling and the levers
            learn from, and a small model at its usual temperature mostly repeats one habit.
        max_turns: Turn budget per episode.
        max_reply_tokens: Cap on tokens per model reply.
        concurrency: Episodes per model batch.
        seed: Master seed.
        reflector: Model reference for the insights lever (default: the agent's model).
        curve: Evaluate every newly accepted version on the test split, for the learning curve.
        rft_steps: Optimiser steps of each ``rft`` proposal.
    """

    env: str
    model: str = "local"
    levers: tuple[str, ...] = ("exemplars", "insights", "rft")
    rounds: int = 3
    train_tasks: int = 48
    train_k: int = 4
    probe_tasks: int = 40
    probe_k: int = 1
    test_tasks: int = 100
    test_k: int = 1
    max_difficulty: int | None = None
    alpha: float = 0.05
    flip_budget: float = 0.1
    temperature: float = 0.7
    explore_temperature: float = 1.0
    max_turns: int = 8
    max_reply_tokens: int = 64
    concurrency: int = 16
    seed: int = 0
    reflector: str | None = None
    curve: bool = True
    rft_steps: int = 40

    def to_dict(self) -> dict[str, Any]:
        """Return the settings as JSON-serialisable data."""
        data = asdict(self)
        data["levers"] = list(self.levers)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImproveConfig:
        """Build settings from :meth:`to_dict` output."""
        return cls(**{**data, "levers": tuple(data["levers"])})


@dataclass
class _Run:
    """The live state of a run: where things are and what has been done."""

    config: ImproveConfig
    out: Path
    env: Env
    store: Store
    run_id: str
    backends: Backends
    reflector: Model | None
    progress: Progress | None
    log: Log
    state: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Model] = field(default_factory=dict)

    def agent_dir(self, version: str) -> Path:
        return self.out / AGENTS_DIR / version

    def agent(self, version: str) -> Agent:
        return load_agent(str(self.agent_dir(version)))[0]

    def model_for(self, agent: Agent) -> Model:
        if agent.version not in self.models:
            self.models[agent.version] = self.backends(agent, self.agent_dir(agent.version))
        return self.models[agent.version]

    def save_state(self) -> None:
        staging = self.out / f".{STATE_FILE}.tmp"
        staging.write_text(json.dumps(self.state, indent=2))
        os.replace(staging, self.out / STATE_FILE)

    def play(
        self, agent: Agent, tasks: Sequence[Task], k: int, seed: int, label: str, first: int = 0
    ) -> list[Trajectory]:
        """Roll ``agent`` out on ``tasks`` (resuming), store every episode, return all of them."""
        config = RolloutConfig(
            k=k,
            concurrency=self.config.concurrency,
            max_reply_tokens=self.config.max_reply_tokens,
            seed=seed,
            first_sample=first,
        )
        done = self.store.done_keys(self.run_id, agent.version)
        model = None if agent.scripted else self.model_for(agent)
        rollout(
            self.env,
            tasks,
            agent,
            model,
            config,
            skip=done,
            on_trajectory=lambda t: self.store.add_trajectory(self.run_id, t),
            progress=self.progress,
            description=label,
        )
        wanted = {(t.id, s) for t in tasks for s in range(first, first + k)}
        return [
            t
            for _, t in self.store.trajectories(
                self.run_id, agent=agent.version, task_ids={t.id for t in tasks}
            )
            if (t.task.id, t.sample) in wanted
        ]


def cached_backends(
    build: Callable[[str, Path | None], Model] | None = None,
) -> Backends:
    """Return a :data:`Backends` that builds each (model, adapter) backend once and reuses it.

    Args:
        build: ``build(model_reference, adapter_path)``; default :func:`make_model`.
    """

    def default(spec: str, adapter: Path | None) -> Model:
        return make_model(spec, **({"adapter": str(adapter)} if adapter else {}))

    made: dict[tuple[str, Path | None], Model] = {}

    def backend(agent: Agent, directory: Path | None) -> Model:
        key = (agent.model, agent.adapter_path(directory))
        if key not in made:
            made[key] = (build or default)(*key)
        return made[key]

    return backend


def draw(env: Env, split: Split, n: int, seed: int, max_difficulty: int | None) -> list[Task]:
    """Draw ``n`` tasks of ``split`` spread evenly over difficulties ``1..max_difficulty``."""
    top = min(max_difficulty or env.max_difficulty, env.max_difficulty)
    per_level = [n // top + (1 if level < n % top else 0) for level in range(top)]
    return [
        task
        for level, count in enumerate(per_level, start=1)
        for task in env.tasks(split, count, seed=seed, difficulty=level)
    ]


def improve(
    config: ImproveConfig,
    env: Env,
    out: Path,
    backends: Backends,
    *,
    resume: bool = False,
    reflector: Model | None = None,
    progress: Progress | None = None,
    log: Log = print,
    levers: Sequence[Lever] | None = None,
) -> dict[str, Any]:
    """Run the self-improvement loop and return (and write) ``summary.json``'s content.

    Args:
        config: Run settings.
        env: The env to practise in.
        out: The run directory.
        backends: Builds the model backend of an agent (given its directory).
        resume: Continue the run in ``out`` instead of starting a new one.
        reflector: The insights lever's reflector (default: each agent's own backend).
        progress: Progress display for rollouts, or ``None``.
        log: Where to report what happens, one line at a time.
        levers: Lever objects to use instead of the built-in ones ``config.levers`` names
            (their names must match ``config.levers``); how custom levers join the loop.

    Raises:
        ValueError: If ``out`` holds another run and ``resume`` is false, or holds no run (or
            one with other settings) and ``resume`` is true, or a lever name is unknown.
    """
    if levers is None:
        levers = make_levers(config.levers, {"rft": {"steps": config.rft_steps}})
    elif tuple(lever.name for lever in levers) != config.levers:
        raise ValueError(f"config.levers {config.levers} does not name the levers given")
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out)
    try:
        run = _open_run(config, env, out, store, backends, reflector, progress, log, resume)
        started = time.perf_counter() - run.state.get("seconds", 0.0)
        summary = _loop(run, levers, started)
    finally:
        store.close()
    return summary


def _open_run(
    config: ImproveConfig,
    env: Env,
    out: Path,
    store: Store,
    backends: Backends,
    reflector: Model | None,
    progress: Progress | None,
    log: Log,
    resume: bool,
) -> _Run:
    existing = store.runs(kind="improve")
    if existing and not resume:
        raise ValueError(f"{out} already holds a run; pass --resume to continue it or pick --out")
    if resume:
        if not existing:
            raise ValueError(f"{out} holds no run to resume")
        saved = ImproveConfig.from_dict(existing[0].config)
        if replace(saved, rounds=config.rounds) != replace(config, rounds=saved.rounds):
            raise ValueError(f"{out} was started with other settings: {saved.to_dict()}")
        run_id = existing[0].id
        store.finish_run(run_id, "running")
        state = json.loads((out / STATE_FILE).read_text()) if (out / STATE_FILE).exists() else {}
        log(f"resuming run {run_id} after round {len(state.get('rounds', []))}")
    else:
        run_id = store.start_run("improve", config.to_dict())
        state = {}
    run = _Run(config, out, env, store, run_id, backends, reflector, progress, log, state)
    if not run.agent_dir("base").joinpath("agent.json").exists():
        base = Agent(model=config.model, temperature=config.temperature, max_turns=config.max_turns)
        base.save(run.agent_dir("base"))
        store.add_agent_version("base", parent=None, lever="base", path=run.agent_dir("base"))
    run.state.setdefault("incumbent", "base")
    run.state.setdefault("rounds", [])
    run.state.setdefault("versions", 0)
    run.state.setdefault("tokens", 0)
    run.save_state()
    return run


def _loop(run: _Run, levers: Sequence[Lever], started: float) -> dict[str, Any]:
    config, env = run.config, run.env
    probe = draw(env, "probe", config.probe_tasks, config.seed, config.max_difficulty)
    test = draw(env, "test", config.test_tasks, config.seed, config.max_difficulty)
    tests: dict[str, Metrics] = {"base": _evaluate(run, run.agent("base"), test)}
    run.log(f"base test pass@1 {tests['base'].pass_at_1:.3f}")
    for number in range(len(run.state["rounds"]) + 1, config.rounds + 1):
        record = _round(run, number, levers, probe)
        incumbent = run.state["incumbent"]
        if config.curve and incumbent not in tests:
            tests[incumbent] = _evaluate(run, run.agent(incumbent), test)
            record["test"] = tests[incumbent].to_dict()
        run.state["rounds"].append(record)
        run.state["seconds"] = time.perf_counter() - started
        run.save_state()
    final = run.agent(run.state["incumbent"])
    if final.version not in tests:
        tests[final.version] = _evaluate(run, final, test)
    summary = _summary(run, tests["base"], tests[final.version], time.perf_counter() - started)
    (run.out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    run.store.finish_run(run.run_id, "done")
    return summary


def _evaluate(run: _Run, agent: Agent, test: Sequence[Task]) -> Metrics:
    """Play the test split (resuming) and return the metrics; never used for decisions."""
    seed = run.config.seed + TEST_SEED_OFFSET
    played = run.play(agent, test, run.config.test_k, seed, f"test {agent.version}")
    return summarize(played, run.config.test_k)


def _round(
    run: _Run, number: int, levers: Sequence[Lever], probe: Sequence[Task]
) -> dict[str, Any]:
    """Run one round and return its record for ``summary.json``."""
    config, store = run.config, run.store
    tick, tokens_before = time.perf_counter(), _tokens(store, run.run_id)
    incumbent = run.agent(run.state["incumbent"])
    run.log(f"round {number}: incumbent {incumbent.version}")
    tasks = _round_tasks(run, number)
    first = (number - 1) * config.train_k
    explorer = replace(incumbent, temperature=config.explore_temperature)
    explored = run.play(explorer, tasks, config.train_k, config.seed + number, "train", first)
    # Hindsight tasks above the run's difficulty cap would teach what the run never asks for.
    top = config.max_difficulty or run.env.max_difficulty
    relabelled = [
        r for t in explored for r in relabel(run.env, t, incumbent) if r.task.difficulty <= top
    ]
    store.add_trajectories(run.run_id, relabelled)
    experience = [t for _, t in store.trajectories(run.run_id, split="train")]
    run.log(
        f"  {sum(t.passed for t in explored)}/{len(explored)} training episodes passed, "
        f"{len(relabelled)} relabelled in hindsight"
    )
    incumbent_probe = _probe(run, incumbent, probe)
    candidates: list[dict[str, Any]] = []
    accepted: list[tuple[float, str]] = []
    for lever in levers:
        candidate = _candidate(run, lever, incumbent, experience, number)
        if candidate is None:
            candidates.append(
                {
                    "lever": lever.name,
                    "version": None,
                    "accepted": False,
                    "reason": "nothing to propose",
                }
            )
            continue
        decision = decide(
            incumbent_probe,
            _probe(run, candidate, probe),
            GateConfig(alpha=config.alpha, flip_budget=config.flip_budget, seed=config.seed),
        )
        store.add_decision(
            run.run_id,
            round=number,
            lever=lever.name,
            candidate=candidate.version,
            incumbent=incumbent.version,
            accepted=decision.accepted,
            numbers=decision.to_dict(),
        )
        store.add_agent_version(
            candidate.version,
            parent=incumbent.version,
            lever=lever.name,
            path=run.agent_dir(candidate.version),
            metadata={"round": number, **decision.to_dict()},
        )
        run.log(
            f"  {lever.name} -> {candidate.version}: "
            f"{'ACCEPTED' if decision.accepted else 'rejected'}, {decision.reason}"
        )
        candidates.append({"lever": lever.name, "version": candidate.version, **decision.to_dict()})
        if decision.accepted:
            accepted.append((decision.probe_gain, candidate.version))
        else:
            run.models.pop(candidate.version, None)
    if accepted:
        run.state["incumbent"] = max(accepted)[1]
    new = run.agent(run.state["incumbent"])
    probe_pass = summarize(_probe(run, new, probe), config.probe_k).pass_at_1
    return {
        "round": number,
        "incumbent": new.version,
        "probe": probe_pass,
        "candidates": candidates,
        "train_passed": sum(t.passed for t in explored),
        "train_episodes": len(explored),
        "relabelled": len(relabelled),
        "seconds": time.perf_counter() - tick,
        "tokens": _tokens(store, run.run_id) - tokens_before,
    }


def _round_tasks(run: _Run, number: int) -> list[Task]:
    """The round's training tasks, chosen once and saved so a resume replays the same ones."""
    saved = run.state.setdefault("round_tasks", {})
    if str(number) not in saved:
        history = [t for _, t in run.store.trajectories(run.run_id, split="train")]
        curriculum = CurriculumConfig(max_difficulty=run.config.max_difficulty)
        tasks = choose_tasks(
            run.env, history, run.config.train_tasks, run.config.seed * 7919 + number, curriculum
        )
        saved[str(number)] = [t.to_dict() for t in tasks]
        run.save_state()
    return [Task.from_dict(t) for t in saved[str(number)]]


def _probe(run: _Run, agent: Agent, probe: Sequence[Task]) -> list[Trajectory]:
    seed = run.config.seed + PROBE_SEED_OFFSET
    return run.play(agent, probe, run.config.probe_k, seed, f"probe {agent.version}")


def _candidate(
    run: _Run, lever: Lever, incumbent: Agent, experience: Sequence[Trajectory], number: int
) -> Agent | None:
    """Return the lever's candidate, reusing one a previous attempt finished writing."""
    decided = {(d.round, d.lever): d.candidate for d in run.store.decisions(run.run_id)}
    if (number, lever.name) in decided:
        return run.agent(decided[(number, lever.name)])
    slots = run.state.setdefault("slots", {})
    key = f"{number}:{lever.name}"
    if key not in slots:
        run.state["versions"] += 1
        slots[key] = f"v{run.state['versions']}"
        run.save_state()
    version = slots[key]
    final = run.agent_dir(version)
    if (final / "agent.json").exists():
        return run.agent(version)
    workdir = final.parent / f".{version}.partial"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    context = LeverContext(
        env=run.env,
        incumbent=incumbent,
        experience=experience,
        model=None if incumbent.scripted else run.model_for(incumbent),
        reflector=run.reflector,
        workdir=workdir,
        version=version,
        seed=run.config.seed + number,
        progress=run.progress,
    )
    candidate = lever.propose(context)
    if candidate is None:
        shutil.rmtree(workdir, ignore_errors=True)
        return None
    inherited = incumbent.adapter_path(run.agent_dir(incumbent.version))
    if candidate.adapter == incumbent.adapter and inherited is not None:
        # An adapter kept from the incumbent lives in the incumbent's directory; point there,
        # relative, so the run directory stays movable.
        candidate = replace(candidate, adapter=os.path.relpath(inherited, final))
    candidate = replace(
        candidate, notes={**candidate.notes, "learned_from": len(experience), "round": number}
    )
    candidate.save(workdir)
    os.replace(workdir, final)  # the directory appears whole or not at all
    return candidate


def _tokens(store: Store, run_id: str) -> int:
    return sum(t.prompt_tokens + t.completion_tokens for _, t in store.trajectories(run_id))


def _summary(run: _Run, base: Metrics, final: Metrics, seconds: float) -> dict[str, Any]:
    def headline(metrics: Metrics) -> dict[str, Any]:
        data = metrics.to_dict()
        return {
            key: data[key]
            for key in (
                "pass@1",
                "pass@k",
                "pass^k",
                "mean_score",
                "n",
                "k",
                "ci95",
                "by_difficulty",
            )
        }

    return {
        "env": run.config.env,
        "model": run.config.model,
        "levers": list(run.config.levers),
        "run_id": run.run_id,
        "final_version": run.state["incumbent"],
        "base": headline(base),
        "final": headline(final),
        "rounds": run.state["rounds"],
        "seconds": seconds,
        "tokens": _tokens(run.store, run.run_id),
        "rollouts": len(run.store.trajectories(run.run_id)),
        "config": run.config.to_dict(),
    }
