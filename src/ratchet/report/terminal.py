"""Terminal rendering of trajectories (``ratchet show``)."""

from __future__ import annotations

import json

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from ratchet.core.trajectory import Trajectory


def render_trajectory(trajectory: Trajectory, identifier: int | str = "") -> RenderableType:
    """Return a readable view of one episode: task, each turn, errors in red, the verdict."""
    task = trajectory.task
    header = Text.assemble(
        (f"trajectory {identifier}  ", "bold"),
        f"env {task.env} v{trajectory.env_version} | task {task.id} ({task.split}, "
        f"{task.family}, difficulty {task.difficulty}) | agent {trajectory.agent} | "
        f"model {trajectory.model or '-'} | sample {trajectory.sample}",
    )
    parts: list[RenderableType] = [header]
    system = next((m for m in trajectory.messages if m["role"] == "system"), None)
    if system:
        parts.append(Panel(Text(str(system["content"])), title="system", border_style="dim"))
    parts.append(Panel(Text(task.instruction), title="task", border_style="cyan"))
    exemplars = trajectory.metadata.get("exemplars") or []
    if exemplars:
        parts.append(Text(f"demonstrations shown: {'; '.join(exemplars)}", style="dim"))
    for number, step in enumerate(trajectory.steps, start=1):
        if step.call is not None:
            action = Text(f"{step.call.name}({json.dumps(step.call.arguments)})", style="bold")
        else:
            action = Text(f"unparsed reply: {step.output!r}", style="bold red")
        style = "red" if step.failed else "green"
        body = Group(action, Text(f"-> {step.observation.text}", style=style))
        meta = f"turn {number} | {step.completion_tokens} tokens | {step.latency_s:.2f}s"
        parts.append(Panel(body, title=meta, border_style=style))
    parts.append(_outcome(trajectory))
    return Group(*parts)


def _outcome(trajectory: Trajectory) -> Text:
    if trajectory.error:
        return Text(f"CRASHED: {trajectory.error}", style="bold red")
    verdict = trajectory.verdict
    ending = "truncated" if trajectory.truncated else "finished"
    if verdict is None:
        return Text(f"no verdict ({ending})", style="bold red")
    label = "PASSED" if verdict.passed else "FAILED"
    metrics = ", ".join(f"{k}={v:g}" for k, v in verdict.metrics.items())
    return Text(
        f"{label} score {verdict.score:g} ({ending}, {trajectory.seconds:.2f}s): "
        f"{verdict.feedback}" + (f" [{metrics}]" if metrics else ""),
        style="bold green" if verdict.passed else "bold red",
    )
