"""The ``ratchet`` command line: a thin layer over the library."""

from __future__ import annotations

import json
import webbrowser
from dataclasses import dataclass, replace
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from ratchet.agent import Agent, load_agent
from ratchet.check import check_env
from ratchet.display import render_trajectory
from ratchet.env import Env
from ratchet.export import to_dataset, write_jsonl
from ratchet.improve import ImproveConfig, cached_backends
from ratchet.improve import improve as run_improve
from ratchet.metrics import Metrics, summarize
from ratchet.models.base import Model, ModelError, make_model
from ratchet.registry import EnvLoadError, UnknownEnvError, env_names, make_env
from ratchet.rollout import RolloutConfig, progress_bars, rollout
from ratchet.store import Store, StoreError
from ratchet.task import SPLITS, Split, Task

app = typer.Typer(
    name="ratchet",
    help="Make LLM agents better from their own verified experience.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Options shared by several commands, declared once.
EnvName = Annotated[str, typer.Argument(metavar="ENV", help="Env name, e.g. calc.")]
AgentRef = Annotated[str, typer.Option(help="base, oracle, null or an agent directory.")]
ModelRef = Annotated[
    str | None, typer.Option(help="local, local:PATH, openai:NAME or fake (default: local).")
]
BaseUrl = Annotated[str | None, typer.Option(help="Server URL for openai models.")]
TaskCount = Annotated[int, typer.Option("-n", min=1, help="How many tasks.")]
Samples = Annotated[int, typer.Option("-k", min=1, help="Samples per task.")]
Difficulty = Annotated[int | None, typer.Option(min=1, help="Only this difficulty.")]
Seed = Annotated[int, typer.Option(help="Seed for tasks and sampling.")]
Concurrency = Annotated[int, typer.Option(min=1, help="Episodes per model batch.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]


console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as an error and exit with ``code`` (no traceback)."""
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def load_env(name: str) -> Env:
    """Return the env ``name`` or exit with a message listing the known envs."""
    try:
        return make_env(name)
    except (UnknownEnvError, EnvLoadError) as exc:
        fail(str(exc))


def parse_split(value: str) -> Split:
    """Return ``value`` as a split or exit with the allowed values."""
    for split in SPLITS:
        if value == split:
            return split
    fail(f"--split must be one of {', '.join(SPLITS)}; got {value!r}")


def _version(show: bool) -> None:
    if show:
        console.print(f"ratchet {package_version('ratchet')}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Make LLM agents better from their own verified experience."""


@app.command()
def envs() -> None:
    """List the available envs."""
    table = Table("env", "version", "max difficulty", "description")
    for name in env_names():
        try:
            env = make_env(name)
        except EnvLoadError as exc:
            table.add_row(name, "-", "-", f"[red]{exc}[/]")
            continue
        table.add_row(name, env.version, str(env.max_difficulty), env.description)
    console.print(table)


@app.command()
def tasks(
    env_name: EnvName,
    split: Annotated[str, typer.Option(help="train, probe or test.")] = "train",
    n: Annotated[int, typer.Option("-n", min=0, help="How many tasks.")] = 5,
    difficulty: Annotated[
        int | None, typer.Option(min=1, help="Only this difficulty (default: all levels).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for drawing tasks.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON task per line.")] = False,
) -> None:
    """Print tasks drawn from an env."""
    env = load_env(env_name)
    try:
        drawn = env.tasks(parse_split(split), n, seed=seed, difficulty=difficulty)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        for task in drawn:
            typer.echo(json.dumps(task.to_dict(), sort_keys=True))
        return
    table = Table("id", "difficulty", "family", "instruction", show_lines=True)
    for task in drawn:
        table.add_row(task.id, str(task.difficulty), task.family, task.instruction)
    console.print(table)


@app.command()
def check(
    env_name: EnvName,
    n: Annotated[int, typer.Option("-n", min=1, help="Test tasks per policy.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed for drawing tasks.")] = 0,
) -> None:
    """Check an env's conformance: schemas, determinism, oracle 1, null 0, forged claims 0."""
    report = check_env(load_env(env_name), n=n, seed=seed)
    table = Table("check", "result", "detail", title=f"ratchet check {env_name}")
    for result in report.results:
        mark = "[green]pass[/]" if result.passed else "[red]FAIL[/]"
        table.add_row(result.name, mark, result.detail)
    console.print(table)
    if not report.passed:
        fail(f"{env_name} fails {sum(not r.passed for r in report.results)} check(s)", code=1)
    console.print(f"[green]{env_name} passes all {len(report.results)} checks[/]")


def load_model(spec: str, base_url: str | None, adapter: Path | None) -> Model:
    """Build the backend ``spec`` or exit with a clear message."""
    options: dict[str, object] = {}
    if base_url:
        options["base_url"] = base_url
    if adapter is not None:
        options["adapter"] = str(adapter)
    try:
        return make_model(spec, **options)
    except (ModelError, ValueError, TypeError) as exc:
        fail(str(exc))


@dataclass(frozen=True)
class _Plan:
    """What ``eval`` and ``run`` play: the agent, its directory, the tasks, the settings."""

    agent: Agent
    directory: Path | None
    tasks: list[Task]
    settings: dict[str, Any]


def _plan(
    env: Env,
    agent: str,
    model: str | None,
    split: str,
    n: int,
    difficulty: int | None,
    seed: int,
) -> _Plan:
    """Resolve the agent and draw the tasks, or exit with a clear message."""
    try:
        chosen, directory = load_agent(agent, model or "local")
        tasks = env.tasks(parse_split(split), n, seed=seed, difficulty=difficulty)
    except ValueError as exc:
        fail(str(exc))
    if model is not None:
        chosen = replace(chosen, model=model)
    settings = {
        "env": env.name,
        "agent": agent,
        "model": chosen.model,
        "split": split,
        "n": n,
        "difficulty": difficulty,
        "seed": seed,
    }
    return _Plan(chosen, directory, tasks, settings)


def _backend(plan: _Plan, base_url: str | None) -> Model | None:
    """The plan's model backend (``None`` for scripted agents)."""
    if plan.agent.scripted:
        return None
    return load_model(plan.agent.model, base_url, plan.agent.adapter_path(plan.directory))


def _print_metrics(title: str, metrics: Metrics) -> None:
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
        f"pass@1 {metrics.pass_at_1:.3f} (95% CI {low:.3f}-{high:.3f}); "
        f"{metrics.tokens_per_task:.0f} tokens and {metrics.seconds_per_task:.2f} s per task; "
        f"{metrics.errors_per_episode:.2f} error observations per episode"
    )


@app.command("eval")
def evaluate(
    env_name: EnvName,
    agent: AgentRef = "base",
    model: ModelRef = None,
    base_url: BaseUrl = None,
    split: Annotated[str, typer.Option(help="train, probe or test.")] = "test",
    n: TaskCount = 50,
    k: Samples = 1,
    difficulty: Difficulty = None,
    seed: Seed = 0,
    concurrency: Concurrency = 16,
    out: Annotated[Path, typer.Option(help="Store the episodes and the report here.")] = Path(
        "runs/eval"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: Quiet = False,
) -> None:
    """Evaluate an agent: pass@1, pass@k, pass^k, mean score, CI, cost, per difficulty."""
    env = load_env(env_name)
    plan = _plan(env, agent, model, split, n, difficulty, seed)
    backend = _backend(plan, base_url)
    chosen, tasks = plan.agent, plan.tasks
    config = RolloutConfig(k=k, concurrency=concurrency, seed=seed)
    settings = {**plan.settings, "k": k}
    with Store(out) as store, progress_bars(enabled=not (quiet or as_json)) as progress:
        run_id = store.start_run("eval", settings)
        try:
            trajectories = rollout(
                env,
                tasks,
                chosen,
                backend,
                config,
                on_trajectory=lambda t: store.add_trajectory(run_id, t),
                progress=progress,
                description=f"eval {env_name}",
            )
        except ModelError as exc:
            store.finish_run(run_id, "failed")
            fail(str(exc))
        store.finish_run(run_id, "done")
    metrics = summarize(trajectories, k)
    page = _write_report(out)
    if as_json:
        record = {
            "env": env_name,
            "agent": agent,
            "model": "scripted" if chosen.scripted else chosen.model,
            "split": split,
            **metrics.to_dict(),
        }
        typer.echo(json.dumps(record))
        errors.print(f"report: {page}")
        return
    _print_metrics(f"ratchet eval {env_name} --agent {agent} ({split})", metrics)
    console.print(f"report: {page}")


@app.command()
def improve(
    env_name: EnvName,
    levers: Annotated[
        str, typer.Option(help="Comma-separated levers: exemplars, insights, rft.")
    ] = "exemplars,rft",
    rounds: Annotated[int, typer.Option(min=1, help="Improvement rounds.")] = 2,
    model: Annotated[str, typer.Option(help="local, local:PATH, openai:NAME or fake.")] = "local",
    base_url: BaseUrl = None,
    reflector: Annotated[
        str | None, typer.Option(help="Model for the insights lever (default: --model).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Run directory.")] = Path("runs/improve"),
    resume: Annotated[bool, typer.Option(help="Continue the run in --out.")] = False,
    train_tasks: Annotated[int, typer.Option(min=1, help="Training tasks per round.")] = 32,
    train_k: Annotated[int, typer.Option(min=1, help="Samples per training task.")] = 2,
    probe_tasks: Annotated[int, typer.Option(min=1, help="Probe tasks for the gate.")] = 24,
    probe_k: Annotated[int, typer.Option(min=1, help="Samples per probe task.")] = 1,
    test_tasks: Annotated[int, typer.Option(min=1, help="Held-out test tasks.")] = 36,
    test_k: Annotated[int, typer.Option(min=1, help="Samples per test task.")] = 1,
    max_difficulty: Annotated[
        int, typer.Option(min=1, help="Highest difficulty practised, probed and tested.")
    ] = 1,
    alpha: Annotated[float, typer.Option(help="Gate significance level (one-sided).")] = 0.05,
    flip_budget: Annotated[
        float, typer.Option(help="Share of probe episodes allowed to go from pass to fail.")
    ] = 0.1,
    max_turns: Annotated[int, typer.Option(min=1, help="Turn budget per episode.")] = 3,
    explore_temperature: Annotated[
        float, typer.Option(min=0.0, help="Sampling temperature of training episodes.")
    ] = 1.0,
    max_reply_tokens: Annotated[int, typer.Option(min=8, help="Cap on tokens per reply.")] = 48,
    concurrency: Concurrency = 16,
    seed: Annotated[int, typer.Option(help="Master seed.")] = 0,
    curve: Annotated[
        bool, typer.Option(help="Test every accepted version (learning curve).")
    ] = True,
    rft_steps: Annotated[int, typer.Option(min=1, help="LoRA steps per rft proposal.")] = 30,
    quiet: Quiet = False,
) -> None:
    """Improve an agent: practise, learn with levers, keep only what beats the incumbent."""
    env = load_env(env_name)
    config = ImproveConfig(
        env=env_name,
        model=model,
        levers=tuple(name.strip() for name in levers.split(",") if name.strip()),
        rounds=rounds,
        train_tasks=train_tasks,
        train_k=train_k,
        probe_tasks=probe_tasks,
        probe_k=probe_k,
        test_tasks=test_tasks,
        test_k=test_k,
        max_difficulty=max_difficulty,
        alpha=alpha,
        flip_budget=flip_budget,
        max_turns=max_turns,
        explore_temperature=explore_temperature,
        max_reply_tokens=max_reply_tokens,
        concurrency=concurrency,
        seed=seed,
        reflector=reflector,
        curve=curve,
        rft_steps=rft_steps,
    )
    backends = cached_backends(lambda spec, adapter: load_model(spec, base_url, adapter))
    reflector_model = load_model(reflector, base_url, None) if reflector else None
    with progress_bars(enabled=not quiet) as progress:
        try:
            summary = run_improve(
                config,
                env,
                out,
                backends,
                resume=resume,
                reflector=reflector_model,
                progress=progress,
                log=lambda line: console.print(line, highlight=False),
            )
        except (ValueError, ModelError) as exc:
            fail(str(exc))
    _print_comparison(summary)
    console.print(f"summary: {out / 'summary.json'}")
    console.print(f"report: {_write_report(out)}")


def _print_comparison(summary: dict[str, Any]) -> None:
    base, final = summary["base"], summary["final"]
    table = Table(
        "test split",
        "base",
        f"final ({summary['final_version']})",
        "change",
        title=f"ratchet improve {summary['env']}",
    )
    for key in ("pass@1", "pass@k", "pass^k", "mean_score"):
        change = final[key] - base[key]
        table.add_row(key, f"{base[key]:.3f}", f"{final[key]:.3f}", f"{change:+.3f}")
    console.print(table)


@app.command()
def run(
    env_name: EnvName,
    out: Annotated[Path, typer.Option(help="Store directory to collect into.")],
    agent: AgentRef = "base",
    model: ModelRef = None,
    base_url: BaseUrl = None,
    split: Annotated[str, typer.Option(help="train, probe or test.")] = "train",
    n: TaskCount = 50,
    k: Samples = 1,
    difficulty: Difficulty = None,
    seed: Seed = 0,
    concurrency: Concurrency = 16,
    resume: Annotated[bool, typer.Option(help="Continue the identical run in --out.")] = False,
    quiet: Quiet = False,
) -> None:
    """Collect trajectories into a store (resumable with --resume)."""
    env = load_env(env_name)
    plan = _plan(env, agent, model, split, n, difficulty, seed)
    chosen, tasks = plan.agent, plan.tasks
    settings = {**plan.settings, "k": k}
    with Store(out) as store:
        previous = [r for r in store.runs(kind="run") if r.config == settings]
        if previous and not resume:
            fail(f"{out} already holds this run ({previous[0].id}); add --resume to continue it")
        run_id = previous[0].id if previous else store.start_run("run", settings)
        backend = _backend(plan, base_url)
        config = RolloutConfig(k=k, concurrency=concurrency, seed=seed)
        with progress_bars(enabled=not quiet) as progress:
            try:
                played = rollout(
                    env,
                    tasks,
                    chosen,
                    backend,
                    config,
                    skip=store.done_keys(run_id, chosen.version),
                    on_trajectory=lambda t: store.add_trajectory(run_id, t),
                    progress=progress,
                    description=f"run {env_name}",
                )
            except ModelError as exc:
                store.finish_run(run_id, "failed")
                fail(str(exc))
            except KeyboardInterrupt:
                store.finish_run(run_id, "interrupted")
                fail("interrupted; finished episodes are kept: rerun with --resume", code=130)
        store.finish_run(run_id, "done")
        total = len(store.trajectories(run_id))
    console.print(f"run {run_id}: {len(played)} new episodes, {total} in total, stored in {out}")


@app.command()
def show(
    trajectory_id: Annotated[int, typer.Argument(metavar="ID", help="Trajectory id.")],
    store_dir: Annotated[Path, typer.Option("--store", help="Store directory.")] = Path(
        "runs/improve"
    ),
) -> None:
    """Render one stored trajectory in the terminal."""
    if not (store_dir / "ratchet.db").exists():
        fail(f"no store at {store_dir} (pass --store DIR)")
    with Store(store_dir) as store:
        try:
            trajectory = store.trajectory(trajectory_id)
        except StoreError as exc:
            fail(str(exc))
    console.print(render_trajectory(trajectory, trajectory_id))


@app.command()
def export(
    store_dir: Annotated[Path, typer.Argument(metavar="STORE", help="Store directory.")],
    out: Annotated[Path, typer.Option(help="Output file (jsonl) or directory (dataset).")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl or dataset.")] = "jsonl",
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    split: Annotated[str | None, typer.Option(help="Only this split.")] = None,
    passed: Annotated[
        bool | None, typer.Option("--passed/--failed", help="Only passed or only failed.")
    ] = None,
) -> None:
    """Export trajectories as OpenAI-chat JSONL or a Hugging Face dataset (with loss masks)."""
    if fmt not in ("jsonl", "dataset"):
        fail(f"--format must be jsonl or dataset; got {fmt!r}")
    if not (store_dir / "ratchet.db").exists():
        fail(f"no store at {store_dir}")
    with Store(store_dir) as store:
        chosen = [t for _, t in store.trajectories(run_id, split=split, passed=passed)]
    if fmt == "jsonl":
        write_jsonl(chosen, out)
    else:
        to_dataset(chosen).save_to_disk(str(out))
    console.print(f"exported {len(chosen)} trajectories to {out}")


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="An improve or eval run.")],
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the report in a web browser.")
    ] = False,
) -> None:
    """Write the HTML report of a run to RUN_DIR/report/index.html."""
    page = _write_report(run_dir)
    console.print(f"report: {page}")
    if open_browser:
        webbrowser.open(page.resolve().as_uri())


def _write_report(run_dir: Path) -> Path:
    try:
        from ratchet.report import ReportError, write_report
    except ImportError as exc:
        fail(f"the report needs the report extra (pip install 'ratchet[report]'): {exc}")
    try:
        return write_report(run_dir)
    except ReportError as exc:
        fail(str(exc))
