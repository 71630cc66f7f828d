"""``ratchet improve``: the self-improvement loop from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ratchet.cli.display import progress_display
from ratchet.cli.options import (
    BaseUrl,
    EnvRef,
    Quiet,
    RayAddress,
    RayEpisodes,
    RayWorkers,
    Threads,
    build_config,
    config_options,
    console,
    errors,
    fail,
    load_env,
    load_model,
    ray_pool,
    with_options,
)
from ratchet.cli.report import write_report
from ratchet.engine.models import ModelError, cached_backends
from ratchet.improve.config import ImproveConfig
from ratchet.improve.loop import improve as run_improve
from ratchet.improve.loop import weight_trainer

PANELS = {
    **dict.fromkeys(
        ("model", "base_url", "threads", "max_difficulty", "explore", "seed", "temperature",
         "experience", "resume"),
        "Run",
    ),
    **dict.fromkeys(
        ("rounds", "train_tasks", "train_k", "probe_tasks", "probe_k", "test_tasks", "test_k",
         "concurrency", "max_reply_tokens", "max_turns", "max_episode_tokens", "timeout_s"),
        "Budget",
    ),
    **dict.fromkeys(
        ("levers", "lever_options", "reflector", "train_steps", "weights"),
        "Levers",
    ),
    **dict.fromkeys(
        ("alpha", "flip_budget", "retest_k", "probe_growth", "smallest_gain", "probe_all_levels"),
        "Gate",
    ),
    **dict.fromkeys(("out", "quiet", "curve"), "Output"),
}  # fmt: skip
"""The ``--help`` panel of each option of ``ratchet improve``; the rest are under Advanced."""

HELPS = {"max_turns": "Model calls before an episode is truncated (unset: max_difficulty plus 2)."}
"""Help texts of ``ratchet improve`` that differ from the config docstrings' (see
:meth:`ImproveConfig.budget`)."""


@with_options(config_options(ImproveConfig, exclude=("env",), helps=HELPS), PANELS, "Advanced")
def improve(
    env_ref: EnvRef,
    options: dict[str, Any],
    base_url: BaseUrl = None,
    threads: Threads = None,
    out: Annotated[Path, typer.Option(help="Run directory.")] = Path("runs/improve"),
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run in --out (same options).")
    ] = False,
    quiet: Quiet = False,
    ray: RayAddress = None,
    ray_workers: RayWorkers = 2,
    ray_episodes: RayEpisodes = 8,
) -> None:
    """Improve an agent: practise, learn with levers, keep only what beats the incumbent.

    Levers, in any combination (--levers skills,tasks; see docs/improve.md):

    exemplars: verified episodes shown as demonstrations
    insights: rules distilled by a reflector
    rft: LoRA fine-tuning on verified successes
    pairs: DPO on the actions that parted successes from failures
    grpo: group-relative updates over each task's samples
    demos: outside demonstrations (privileged, reported apart from self-improvement)
    skills: tool-call procedures mined from successes, offered as tools
    prompt: system prompt and env guidance evolved by reflection (GEPA; --reflector)
    tasks: new practice tasks aimed at the agent's failures, mixed into the curriculum
    """
    env = load_env(env_ref)
    config = build_config(ImproveConfig, options, env=env_ref)
    backends = cached_backends(lambda spec, adapter: load_model(spec, base_url, adapter, threads))
    reflector = load_model(config.reflector, base_url, None, threads) if config.reflector else None
    try:
        with (
            ray_pool(ray, env_ref, ray_workers, ray_episodes, base_url, threads) as pool,
            progress_display(quiet) as progress,
        ):
            summary = run_improve(
                config,
                env,
                out,
                backends,
                resume=resume,
                reflector=reflector,
                progress=progress,
                log=lambda line: console.print(line, highlight=False),
                trainer=lambda: weight_trainer(config, base_url),
                pool=pool,
            )
    except (ValueError, ModelError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        errors.print(
            f"[bold yellow]interrupted:[/] every finished episode and round is kept in {out}; to "
            "continue where the run stopped, run the same command again with --resume.",
            highlight=False,
        )
        raise typer.Exit(130) from None
    _print_comparison(summary)
    model_errors = summary["model_errors"]
    if model_errors["count"]:
        console.print(
            f"[yellow]warning:[/] {model_errors['count']} episodes ended on a model error; "
            f"first: {model_errors['first']}",
            highlight=False,
        )
    for name, reason in summary.get("accepted_findings", {}).items():
        console.print(
            f"[yellow]accepted finding:[/] the env's verifier lets the {name} attack through, "
            f"accepted knowingly: {reason}",
            highlight=False,
        )
    console.print(f"summary: {out / 'summary.json'}")
    console.print(f"report: {write_report(out)}")


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
    # A suite: pass@1 per env and per level of each, so no env's loss hides in the whole.
    for env, before in base.get("by_env", {}).items():
        after = final.get("by_env", {}).get(env, before)
        rows = [(env, before, after)] + [
            (f"{env} level {level}", rates, after["by_difficulty"].get(level, rates))
            for level, rates in before["by_difficulty"].items()
        ]
        for label, was, now in rows:
            change = now["pass@1"] - was["pass@1"]
            table.add_row(
                f"pass@1 {label}", f"{was['pass@1']:.3f}", f"{now['pass@1']:.3f}", f"{change:+.3f}"
            )
    console.print(table)
    low, high = final["ci95"]
    console.print(f"final pass@1 95% CI {low:.3f}-{high:.3f} ({final['ci_method']})")
    for version, mark in summary.get("privileged", {}).items():
        console.print(
            f"[bold yellow]privileged:[/] {version} learned from outside demonstrations "
            f"({mark.get('source')}); the change from base is not self-improvement",
            highlight=False,
        )
