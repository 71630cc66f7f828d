"""Commands that play and inspect episodes: ``eval``, ``run``, ``show``, ``export``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ratchet.cli.options import (
    AgentRef,
    BaseUrl,
    Difficulty,
    EnvRef,
    ModelRef,
    Quiet,
    Samples,
    Seed,
    TaskCount,
    Threads,
    build_config,
    config_options,
    console,
    errors,
    fail,
    load_env,
    load_model,
    parse_split,
    with_options,
)
from ratchet.cli.report import write_report
from ratchet.core.agent import Agent, load_agent
from ratchet.core.env import Env
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.export import to_dataset, write_jsonl
from ratchet.engine.metrics import Metrics, summarize
from ratchet.engine.models import Model, ModelError
from ratchet.engine.rollout import RolloutConfig, progress_bars, rollout
from ratchet.engine.store import DB_NAME, Store, StoreError
from ratchet.engine.tokens import load_tokenizer
from ratchet.report.terminal import render_trajectory

ROLLOUT_OPTIONS = config_options(RolloutConfig)


@dataclass(frozen=True)
class _Plan:
    """What ``eval`` and ``run`` play: the agent, its backend, the tasks, the settings."""

    agent: Agent
    model: Model | None
    tasks: list[Task]
    settings: dict[str, Any]


def _plan(
    env: Env,
    agent: str,
    model: str | None,
    base_url: str | None,
    threads: int | None,
    split: str,
    n: int,
    difficulty: int | None,
    seed: int,
    k: int,
) -> _Plan:
    """Resolve the agent, draw the tasks and build the backend, or exit with a message."""
    try:
        chosen, directory = load_agent(agent, model or "local")
        tasks = env.tasks(parse_split(split), n, seed=seed, difficulty=difficulty)
    except ValueError as exc:
        fail(str(exc))
    if model is not None:
        chosen = replace(chosen, model=model)
    backend = None
    if not chosen.scripted:
        backend = load_model(chosen.model, base_url, chosen.adapter_path(directory), threads)
    settings = {
        "env": env.name,
        "agent": agent,
        "model": chosen.model,
        "split": split,
        "n": n,
        "difficulty": difficulty,
        "seed": seed,
        "k": k,
    }
    return _Plan(chosen, backend, tasks, settings)


@with_options(ROLLOUT_OPTIONS)
def evaluate(
    env_ref: EnvRef,
    options: dict[str, Any],
    agent: AgentRef = "base",
    model: ModelRef = None,
    base_url: BaseUrl = None,
    threads: Threads = None,
    split: Annotated[str, typer.Option(help="train, probe or test.")] = "test",
    n: TaskCount = 50,
    k: Samples = 1,
    difficulty: Difficulty = None,
    seed: Seed = 0,
    out: Annotated[Path, typer.Option(help="Store the episodes and the report here.")] = Path(
        "runs/eval"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: Quiet = False,
) -> None:
    """Evaluate an agent: pass@1, pass@k, pass^k, mean score, CI, cost, per difficulty."""
    env = load_env(env_ref)
    plan = _plan(env, agent, model, base_url, threads, split, n, difficulty, seed, k)
    config = build_config(RolloutConfig, options)
    tick = time.perf_counter()
    with Store(out) as store, progress_bars(enabled=not (quiet or as_json)) as progress:
        run_id = store.start_run("eval", plan.settings)
        try:
            played = rollout(
                env,
                plan.tasks,
                plan.agent,
                plan.model,
                config,
                k=k,
                seed=seed,
                on_trajectory=lambda t: store.add_trajectory(run_id, t),
                progress=progress,
                description=f"eval {env.name}",
            )
        except ModelError as exc:
            store.finish_run(run_id, "failed")
            fail(str(exc))
        store.finish_run(run_id, "done")
    metrics = summarize(played, k, wall_s=time.perf_counter() - tick)
    page = write_report(out)
    if as_json:
        model_name = "scripted" if plan.agent.scripted else plan.agent.model
        record = {
            "env": env.name,
            "agent": agent,
            "model": model_name,
            "split": split,
            **metrics.to_dict(),
        }
        typer.echo(json.dumps(record))
        errors.print(f"report: {page}")
    else:
        print_metrics(f"ratchet eval {env_ref} --agent {agent} ({split})", metrics)
        console.print(f"report: {page}")
    _warn_model_errors(played)


def _warn_model_errors(played: list[Trajectory]) -> None:
    failed = [t for t in played if t.error and t.error.startswith("model error")]
    if failed:
        errors.print(
            f"[yellow]warning:[/] {len(failed)} of {len(played)} episodes ended on a model "
            f"error; first: {failed[0].error}",
            highlight=False,
        )


def print_metrics(title: str, metrics: Metrics) -> None:
    """Print a metrics table (per difficulty and overall) and the headline line."""
    repeated = metrics.k > 1  # pass@k and pass^k only differ from pass@1 with several samples
    columns = ["pass@1", f"pass@{metrics.k}", f"pass^{metrics.k}"] if repeated else ["pass@1"]
    table = Table("difficulty", "tasks", *columns, "mean score", title=title)
    rows = [(str(d), m) for d, m in sorted(metrics.by_difficulty.items())] + [("all", metrics)]
    for label, m in rows:
        rates = [m.pass_at_1, m.pass_at_k, m.pass_hat_k] if repeated else [m.pass_at_1]
        table.add_row(label, str(m.n), *(f"{r:.3f}" for r in rates), f"{m.mean_score:.3f}")
    console.print(table)
    low, high = metrics.ci95
    console.print(
        f"pass@1 {metrics.pass_at_1:.3f} (95% CI {low:.3f}-{high:.3f}, {metrics.ci_method}); "
        f"{metrics.tokens_per_task:.0f} tokens and {metrics.seconds_per_task:.2f} s per task; "
        f"{metrics.errors_per_episode:.2f} error observations per episode"
    )


@with_options(ROLLOUT_OPTIONS)
def run(
    env_ref: EnvRef,
    options: dict[str, Any],
    out: Annotated[Path, typer.Option(help="Store directory to collect into.")],
    agent: AgentRef = "base",
    model: ModelRef = None,
    base_url: BaseUrl = None,
    threads: Threads = None,
    split: Annotated[str, typer.Option(help="train, probe or test.")] = "train",
    n: TaskCount = 50,
    k: Samples = 1,
    difficulty: Difficulty = None,
    seed: Seed = 0,
    resume: Annotated[bool, typer.Option(help="Continue the identical run in --out.")] = False,
    quiet: Quiet = False,
) -> None:
    """Collect trajectories into a store (resumable with --resume)."""
    env = load_env(env_ref)
    plan = _plan(env, agent, model, base_url, threads, split, n, difficulty, seed, k)
    config = build_config(RolloutConfig, options)
    settings = {**plan.settings, "rollout": options}
    with Store(out) as store:
        run_id = _run_id(store, settings, resume, out)
        with progress_bars(enabled=not quiet) as progress:
            try:
                played = rollout(
                    env,
                    plan.tasks,
                    plan.agent,
                    plan.model,
                    config,
                    k=k,
                    seed=seed,
                    skip=store.done_keys(run_id, plan.agent.version),
                    on_trajectory=lambda t: store.add_trajectory(run_id, t),
                    progress=progress,
                    description=f"run {env.name}",
                )
            except ModelError as exc:
                store.finish_run(run_id, "failed")
                fail(str(exc))
            except KeyboardInterrupt:
                store.finish_run(run_id, "interrupted")
                fail("interrupted; finished episodes are kept: rerun with --resume", code=130)
        store.finish_run(run_id, "done")
        total = store.count_trajectories(run_id)
    console.print(f"run {run_id}: {len(played)} new episodes, {total} in total, stored in {out}")
    _warn_model_errors(played)


def _run_id(store: Store, settings: dict[str, Any], resume: bool, out: Path) -> str:
    """The run to continue (``--resume``) or a new one; refuses to mix settings."""
    previous = store.runs(kind="run")
    same = [r for r in previous if r.config == settings]
    if same and not resume:
        fail(f"{out} already holds this run ({same[0].id}); add --resume to continue it")
    if resume and not same:
        if previous:
            changed = {k: v for k, v in settings.items() if previous[-1].config.get(k) != v}
            fail(f"{out} holds no run with these settings to resume (changed: {changed})")
        fail(f"{out} holds no run to resume")
    return same[0].id if same else store.start_run("run", settings)


def show(
    trajectory_id: Annotated[int, typer.Argument(metavar="ID", help="Trajectory id.")],
    store_dir: Annotated[Path, typer.Option("--store", help="Store directory.")] = Path(
        "runs/improve"
    ),
) -> None:
    """Render one stored trajectory in the terminal."""
    if not (store_dir / DB_NAME).exists():
        fail(f"no store at {store_dir} (pass --store DIR)")
    with Store(store_dir) as store:
        try:
            trajectory = store.trajectory(trajectory_id)
        except StoreError as exc:
            fail(str(exc))
    console.print(render_trajectory(trajectory, trajectory_id))


def export(
    store_dir: Annotated[Path, typer.Argument(metavar="STORE", help="Store directory.")],
    out: Annotated[Path, typer.Option(help="Output file (jsonl) or directory (dataset).")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl or dataset.")] = "jsonl",
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    split: Annotated[str | None, typer.Option(help="Only this split.")] = None,
    passed: Annotated[
        bool | None, typer.Option("--passed/--failed", help="Only passed or only failed.")
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="Add token ids and loss masks: 'local', a model directory or GGUF."),
    ] = None,
) -> None:
    """Export trajectories as OpenAI-chat JSONL or a Hugging Face dataset (with loss masks)."""
    if fmt not in ("jsonl", "dataset"):
        fail(f"--format must be jsonl or dataset; got {fmt!r}")
    try:
        loaded = load_tokenizer(tokenizer) if tokenizer else None
    except ValueError as exc:
        fail(str(exc))
    if not (store_dir / DB_NAME).exists():
        fail(f"no store at {store_dir}")
    if not out.parent.is_dir():
        fail(f"the directory for --out does not exist: {out.parent}")
    with Store(store_dir) as store:
        chosen = [t for _, t in store.trajectories(run_id, split=split, passed=passed)]
    if fmt == "jsonl":
        write_jsonl(chosen, out, tokenizer=loaded)
    else:
        to_dataset(chosen, tokenizer=loaded).save_to_disk(str(out))
    console.print(f"exported {len(chosen)} trajectories to {out}")
