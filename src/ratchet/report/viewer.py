"""The trajectory viewer: one self-contained page per episode, turn by turn.

A page shows the task, the verdict and its feedback, the agent version and the memory it used
(the demonstrations retrieved for this episode and the agent's insight rules), then every turn:
the model's raw output, the tool call it parsed to with its arguments, and the observation,
with failed steps highlighted. The full conversation as the model saw it is at the bottom.
"""

from __future__ import annotations

import json
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.trajectory import Step, Trajectory
from ratchet.report.html import badge, esc, page


def trajectory_page(
    trajectory_id: int, trajectory: Trajectory, agent: Agent | None, back: str = "../index.html"
) -> str:
    """Return the viewer page of one stored trajectory.

    Args:
        trajectory_id: The trajectory's id in the store.
        trajectory: The episode.
        agent: The agent version that played it, if its directory is known (for its insights).
        back: Link to the report the page belongs to.
    """
    task = trajectory.task
    title = f"Trajectory {trajectory_id}: {task.id} by {trajectory.agent}"
    parts = [
        f'<header class="top"><div class="eyebrow"><a href="{esc(back)}">← report</a>'
        f" · trajectory {trajectory_id}</div>"
        f"<h1>{badge(_outcome(trajectory))} {esc(task.instruction)}</h1>"
        f'<p class="lede">{esc(task.env)} · {esc(task.family)} · difficulty {task.difficulty}'
        f" · {esc(task.split)} split · played by <b>{esc(trajectory.agent)}</b>"
        f" (sample {trajectory.sample})</p></header>",
        _verdict(trajectory),
        _facts(trajectory_id, trajectory),
        _memory(trajectory, agent),
        "<h2>Turns</h2>",
    ]
    parts += _system_and_task(trajectory)
    parts += [_turn(number, step) for number, step in enumerate(trajectory.steps, start=1)]
    if not trajectory.steps:
        parts.append('<p class="note">The episode has no turns.</p>')
    messages = json.dumps(list(trajectory.messages), indent=2, ensure_ascii=False)
    parts.append(
        "<details><summary>Full conversation as the model saw it (OpenAI chat format, "
        "demonstrations not included)</summary>"
        f"<pre>{esc(messages)}</pre></details>"
    )
    return page(title, "\n".join(parts))


def _outcome(trajectory: Trajectory) -> bool | None:
    return None if trajectory.verdict is None else trajectory.passed


def _verdict(trajectory: Trajectory) -> str:
    verdict = trajectory.verdict
    if verdict is None:
        reason = trajectory.error or "the episode ended before verification"
        return f'<div class="verdict fail"><b>No verdict.</b> {esc(reason)}</div>'
    css = "pass" if verdict.passed else "fail"
    metrics = ", ".join(f"{esc(k)} {v:g}" for k, v in sorted(verdict.metrics.items()))
    extra = f"<div>Sub-metrics: {metrics}</div>" if metrics else ""
    feedback = esc(verdict.feedback) if verdict.feedback else "<i>no feedback</i>"
    return (
        f'<div class="verdict {css}"><b>Verifier: {"passed" if verdict.passed else "failed"}'
        f"</b>, score {verdict.score:.2f}. Feedback: {feedback}{extra}</div>"
    )


def _facts(trajectory_id: int, trajectory: Trajectory) -> str:
    ending = (
        "finished (called finish)"
        if trajectory.terminated
        else "cut off by a budget"
        if trajectory.truncated
        else "stopped"
    )
    rows: list[tuple[str, str]] = [
        ("agent version", f"<b>{esc(trajectory.agent)}</b>"),
        ("model", esc(trajectory.model or "scripted")),
        ("task id", f"<code>{esc(trajectory.task.id)}</code>"),
        ("episode", f"{len(trajectory.steps)} turns, {ending}"),
        (
            "cost",
            f"{trajectory.prompt_tokens:,} prompt + {trajectory.completion_tokens:,} completion"
            f" tokens, {trajectory.seconds:.2f} s",
        ),
        ("error observations", str(trajectory.errors)),
        ("env version", esc(trajectory.env_version)),
        ("stored as", f"trajectory {trajectory_id}"),
    ]
    if trajectory.error:
        rows.insert(4, ("crash", f'<span class="down">{esc(trajectory.error)}</span>'))
    body = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="facts">{body}</dl>'


def _memory(trajectory: Trajectory, agent: Agent | None) -> str:
    shown = trajectory.metadata.get("exemplars") or []
    parts = ["<h2>Memory used</h2>"]
    if shown:
        items = "".join(f"<li>{esc(text)}</li>" for text in shown)
        parts.append(
            f"<h3>Demonstrations in the prompt ({len(shown)})</h3>"
            '<p class="note">Solved training tasks retrieved for this one; their turns came '
            f"before the task.</p><ol>{items}</ol>"
        )
    else:
        parts.append('<p class="note">No demonstrations were shown in this episode.</p>')
    if agent is None:
        parts.append(
            f'<p class="note">The directory of agent {esc(trajectory.agent)} is not in this run,'
            " so its insight rules and adapter are unknown.</p>"
        )
        return "".join(parts)
    if agent.insights:
        items = "".join(
            f"<li>{esc(i.rule)} <span class='badge muted'>+{i.helpful} / -{i.harmful}</span></li>"
            for i in agent.insights
        )
        parts.append(
            f"<h3>Insight rules in the system prompt ({len(agent.insights)})</h3><ol>{items}</ol>"
        )
    else:
        parts.append('<p class="note">The agent has no insight rules.</p>')
    if agent.adapter:
        parts.append(f"<p>Weights: LoRA adapter <code>{esc(agent.adapter)}</code>.</p>")
    lineage = f"derived from {esc(agent.parent)} by {esc(agent.lever)}" if agent.parent else "root"
    parts.append(f'<p class="note">Agent {esc(agent.version)}: {lineage}.</p>')
    return "".join(parts)


def _system_and_task(trajectory: Trajectory) -> list[str]:
    parts = []
    for message in trajectory.messages[:2]:
        role = str(message.get("role", ""))
        if role not in ("system", "user"):
            break
        label = "system prompt" if role == "system" else "task"
        parts.append(
            f'<div class="turn"><div class="head"><span>{label}</span></div>'
            f'<div class="body"><pre>{esc(_text(message.get("content")))}</pre></div></div>'
        )
    return parts


def _turn(number: int, step: Step) -> str:
    failed = step.failed
    head = (
        f"<span>turn {number}{' · error' if failed else ''}</span>"
        f"<span>{step.prompt_tokens:,} + {step.completion_tokens:,} tokens ·"
        f" {step.latency_s:.2f} s</span>"
    )
    body = [f'<div class="role">model output</div><pre>{esc(step.output or "(empty)")}</pre>']
    if step.call is not None:
        arguments = json.dumps(step.call.arguments, indent=2, ensure_ascii=False)
        body.append(
            f'<div class="role">tool call <code>{esc(step.call.name)}</code></div>'
            f"<pre>{esc(arguments)}</pre>"
        )
    else:
        body.append('<div class="role">tool call</div><p class="down">did not parse</p>')
    observation = step.observation
    flags = [
        flag
        for flag, on in (
            ("terminated", observation.terminated),
            ("truncated", observation.truncated),
        )
        if on
    ]
    suffix = f" ({', '.join(flags)})" if flags else ""
    css = ' class="obs-error"' if failed else ""
    body.append(
        f'<div class="role">observation{suffix}</div><pre{css}>{esc(observation.text)}</pre>'
    )
    if observation.error and observation.error not in observation.text:
        body.append(f'<pre class="obs-error">error: {esc(observation.error)}</pre>')
    css_turn = "turn error" if failed else "turn"
    return (
        f'<div class="{css_turn}"><div class="head">{head}</div>'
        f'<div class="body">{"".join(body)}</div></div>'
    )


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)
