"""Commands that play and inspect episodes: ``eval``, ``run``, ``show``, ``export``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ratchet.cli.display import progress_display
from ratchet.cli.options import (
    EnvRef,
    Quiet,
    RayAddress,
    RayEpisodes,
    RayWorkers,
    build_config,
    config_options,
    console,
    errors,
    fail,
    load_env,
    load_model,
    parse_split,
    ray_pool,
    with_options,
)
from ratchet.cli.report import write_report
from ratchet.core.agent import Agent, load_agent
from ratchet.core.env import Env, TooFewTasks, draw_tasks
from ratchet.core.serialise import to_dict
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.cluster import RayPool
from ratchet.engine.export import to_dataset, write_jsonl
from ratchet.engine.metrics import Metrics, summarize
from ratchet.engine.models import Model, ModelError
from ratchet.engine.request import RolloutRequest
from ratchet.engine.rollout import RolloutConfig
from ratchet.engine.store import DB_NAME, Store, StoreError
from ratchet.engine.tokens import load_tokenizer


@dataclass(frozen=True)
class Selection:
    """What ``eval`` and ``run`` play: which agent, on which model, on which tasks.

    Attributes:
        agent: base, oracle, null or an agent directory.
        model: local, local:PATH, openai:NAME or fake (default: the agent's own, else local).
        base_url: Server URL for openai models.
        threads: Torch CPU threads of a local model (default: all cores).
        split: train, probe or test.
        n: How many tasks.
        k: Samples per task.
        difficulty: Only this difficulty (default: all levels, evenly).
        seed: Seed for tasks and sampling.
    """

    agent: str = "base"
    model: str | None = None
    base_url: str | None = None
    threads: int | None = None
    split: str = "test"
    n: int = 50
    k: int = 1
    difficulty: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value, top in (("n", self.n, 100_000), ("k", self.k, 1_000)):
            if not 1 <= value <= top:
                raise ValueError(f"-{name} must be between 1 and {top}; got {value}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be at least 1; got {self.threads}")


def _options(split: str) -> list[Any]:
    flags = {"n": "-n", "k": "-k"}
    selection = config_options(Selection, defaults={"split": split}, flags=flags)
    return [*selection, *config_options(RolloutConfig)]


@dataclass(frozen=True)
class _Plan:
    """A resolved :class:`Selection`: the env, the agent, its backend, the tasks, the settings."""

    env: Env
    agent: Agent
    model: Model | None
    tasks: list[Task]
    settings: dict[str, Any]
    directory: Path | None = None


def _plan(env_ref: str, options: dict[str, Any], remote: bool = False) -> _Plan:
    """Resolve the selection: load the env and agent, draw the tasks, build the backend, or exit.

    With ``remote`` (episodes on Ray workers) no backend is built here: the workers build theirs.
    """
    env = load_env(env_ref)
    pick = build_config(Selection, options)
    try:
        chosen, directory = load_agent(pick.agent, pick.model or "local")
        tasks = draw_tasks(
            env, parse_split(pick.split), pick.n, seed=pick.seed, difficulty=pick.difficulty
        )
    except (ValueError, TooFewTasks) as exc:
        fail(str(exc))
    if pick.model is not None:
        chosen = replace(chosen, model=pick.model)
    backend = None
    if not (chosen.scripted or remote):
        adapter = chosen.adapter_path(directory)
        backend = load_model(chosen.model, pick.base_url, adapter, pick.threads)
    settings = {"env": env.name, **to_dict(pick), "model": chosen.model}
    settings.pop("schema")
    return _Plan(env, chosen, backend, tasks, settings, directory)


@contextmanager
def _storing(
    plan: _Plan, env_ref: str, out: Path, ray: str | None, workers: int, episodes: int
) -> Iterator[tuple[RayPool | None, Store]]:
    """Yield the Ray pool ``plan`` is played on (``None`` without ``--ray``) and the store."""
    base_url, threads = plan.settings["base_url"], plan.settings["threads"]
    with ray_pool(ray, env_ref, workers, episodes, base_url, threads) as pool, Store(out) as store:
        yield pool, store


def _play(
    plan: _Plan,
    options: dict[str, Any],
    store: Store,
    run_id: str,
    skip: set[tuple[str, int]] | None,
    quiet: bool,
    pool: RayPool | None = None,
) -> list[Trajectory]:
    """Play the plan into the store's run (here, or on Ray workers with ``pool``).

    A dead backend marks the run failed and exits.
    """
    env, config = plan.env, build_config(RolloutConfig, options)
    k, seed = plan.settings["k"], plan.settings["seed"]
    with progress_display(quiet) as progress:
        request = RolloutRequest(
            env,
            plan.tasks,
            plan.agent,
            config,
            agent_dir=plan.directory,
            k=k,
            seed=seed,
            skip=skip,
            on_trajectory=lambda t: store.add_trajectory(run_id, t),
            progress=progress,
            description=env.name,
        )
        try:
            if pool is not None:
                return pool.rollout(request)
            return request.play(plan.model)
        except ModelError as exc:
            store.finish_run(run_id, "failed")
            fail(str(exc))
        except KeyboardInterrupt:
            store.finish_run(run_id, "interrupted")
            fail("interrupted; finished episodes are kept: rerun with --resume", code=130)


@with_options(_options(split="test"))
def evaluate(
    env_ref: EnvRef,
    options: dict[str, Any],
    out: Annotated[Path, typer.Option(help="Store the episodes and the report here.")] = Path(
        "runs/eval"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: Quiet = False,
    ray: RayAddress = None,
    ray_workers: RayWorkers = 2,
    ray_episodes: RayEpisodes = 8,
) -> None:
    """Evaluate an agent: pass@1, pass@k, pass^k, mean score, CI, cost, per difficulty."""
    plan = _plan(env_ref, options, remote=ray is not None)
    tick = time.perf_counter()
    with _storing(plan, env_ref, out, ray, ray_workers, ray_episodes) as (pool, store):
        run_id = store.start_run("eval", plan.settings)
        played = _play(plan, options, store, run_id, None, quiet or as_json, pool)
        store.finish_run(run_id, "done")
    metrics = summarize(played, plan.settings["k"], wall_s=time.perf_counter() - tick)
    page = write_report(out)
    split, agent = plan.settings["split"], plan.settings["agent"]
    if as_json:
        model_name = "scripted" if plan.agent.scripted else plan.agent.model
        record = {"env": plan.env.name, "agent": agent, "model": model_name, "split": split,
                  **metrics.to_dict()}  # fmt: skip
        typer.echo(json.dumps(record))
        errors.print(f"report: {page}")
    else:
        print_metrics(f"ratchet eval {env_ref} --agent {agent} ({split})", metrics)
        console.print(f"report: {page}")
    _warn_errors(played)


def _warn_errors(played: list[Trajectory]) -> None:
    """Say how many episodes ended on a model error, or on an infrastructure error."""
    failed = [t for t in played if t.error and t.error.startswith("model error")]
    if failed:
        errors.print(
            f"[yellow]warning:[/] {len(failed)} of {len(played)} episodes ended on a model "
            f"error; first: {failed[0].error}",
            highlight=False,
        )
    lost = [t for t in played if t.infrastructure_failed]
    if lost:
        errors.print(
            f"[yellow]warning:[/] {len(lost)} of {len(played)} episodes ended on an "
            f"infrastructure error and are left out of the rates; first: {lost[0].error}",
            highlight=False,
        )


def print_metrics(title: str, metrics: Metrics) -> None:
    """Print a metrics table and the headline line.

    The table has a row per difficulty and one for all, after the same rows for each env of a
    suite.
    """
    repeated = metrics.k > 1  # pass@k and pass^k only differ from pass@1 with several samples
    columns = ["pass@1", f"pass@{metrics.k}", f"pass^{metrics.k}"] if repeated else ["pass@1"]
    table = Table("difficulty", "tasks", *columns, "mean score", title=title)
    rows = [
        (f"{env} {label}", m)
        for env, whole in sorted(metrics.by_env.items())
        for label, m in [*((str(d), m) for d, m in sorted(whole.by_difficulty.items())),
                         ("all", whole)]
    ]  # fmt: skip
    rows += [(str(d), m) for d, m in sorted(metrics.by_difficulty.items())] + [("all", metrics)]
    for label, m in rows:
        rates = [m.pass_at_1, m.pass_at_k, m.pass_hat_k] if repeated else [m.pass_at_1]
        table.add_row(label, str(m.n), *(f"{r:.3f}" for r in rates), f"{m.mean_score:.3f}")
    console.print(table)
    low, high = metrics.ci95
    console.print(
        f"pass@1 {metrics.pass_at_1:.3f} (95% CI {low:.3f}-{high:.3f}, {metrics.ci_method}); "
        f"{metrics.tokens_per_task:.0f} tokens and {metrics.seconds_per_task:.2f} s per task; "
        f"{metrics.errors_per_episode:.2f} error observations per episode"
        + (
            f"; {metrics.infrastructure_errors} episodes left out (infrastructure errors)"
            if metrics.infrastructure_errors
            else ""
        )
    )


@with_options(_options(split="train"))
def run(
    env_ref: EnvRef,
    options: dict[str, Any],
    out: Annotated[Path, typer.Option(help="Store directory to collect into.")],
    resume: Annotated[bool, typer.Option(help="Continue the identical run in --out.")] = False,
    quiet: Quiet = False,
    ray: RayAddress = None,
    ray_workers: RayWorkers = 2,
    ray_episodes: RayEpisodes = 8,
) -> None:
    """Collect trajectories into a store (resumable with --resume)."""
    plan = _plan(env_ref, options, remote=ray is not None)
    settings = {**plan.settings, "rollout": to_dict(build_config(RolloutConfig, options))}
    with _storing(plan, env_ref, out, ray, ray_workers, ray_episodes) as (pool, store):
        run_id = _run_id(store, settings, resume, out)
        skip = store.done_keys(run_id, plan.agent.version)
        played = _play(plan, options, store, run_id, skip, quiet, pool)
        store.finish_run(run_id, "done")
        total = store.count_trajectories(run_id)
    console.print(f"run {run_id}: {len(played)} new episodes, {total} in total, stored in {out}")
    _warn_errors(played)


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
    # Imported here: the report package loads matplotlib, which every other command skips.
    from ratchet.report.terminal import render_trajectory

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
