"""What an improvement run reports: one record per round, and ``summary.json`` at the end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.env import Env, accepted_findings_of
from ratchet.core.serialise import to_dict
from ratchet.core.trajectory import Trajectory
from ratchet.improve.gate import GateDecision
from ratchet.improve.hindsight import Relabelled
from ratchet.improve.rundir import RunDir

HEADLINE_KEYS = ("pass@1", "pass@k", "pass^k", "mean_score", "n", "k", "ci95", "ci_method", "ci")


def round_record(
    number: int,
    incumbent: Agent,
    explored: Sequence[Trajectory],
    learned: Relabelled,
    baseline: Sequence[Trajectory],
    decisions: Sequence[GateDecision],
    best: GateDecision | None,
) -> dict[str, Any]:
    """The record of one round for ``summary.json`` (the run directory adds cost and levers)."""
    probe_pass = best.candidate_pass if best else sum(t.passed for t in baseline) / len(baseline)
    return {
        "round": number,
        "incumbent_before": incumbent.version,
        "incumbent": best.candidate if best else incumbent.version,
        "probe": probe_pass,
        "probe_tasks": len({t.task.id for t in baseline}),
        "train_passed": sum(t.passed for t in explored),
        "train_episodes": len(explored),
        "relabelled": len(learned.successes) - learned.trimmed,
        "relabels_held_out": len(learned.held_out),
        "trimmed": learned.trimmed,
        "explore_temperatures": _by_temperature(explored),
        "decisions": [to_dict(d) for d in decisions],
    }


def _by_temperature(explored: Sequence[Trajectory]) -> dict[str, list[int]]:
    """``[passed, episodes]`` per root temperature (each root sample's, to 0.1)."""
    groups: dict[str, list[Trajectory]] = {}
    for episode in explored:
        if episode.exploration is None or episode.exploration.parent is not None:
            continue  # the roots' temperatures: the branches inherit theirs
        temperature = episode.exploration.temperature
        key = f"{temperature:.1f}" if temperature is not None else "-"
        groups.setdefault(key, []).append(episode)
    return {key: _counts(episodes) for key, episodes in sorted(groups.items())}


def _counts(episodes: Sequence[Trajectory]) -> list[int]:
    """``[passed, episodes]``."""
    return [sum(t.passed for t in episodes), len(episodes)]


def round_lines(record: dict[str, Any]) -> str:
    """A few log lines saying what a round did."""
    lines = [
        f"  {record['train_passed']}/{record['train_episodes']} training episodes passed, "
        f"{record['relabelled']} relabelled in hindsight "
        f"({record['relabels_held_out']} held out: probe or test problems), "
        f"{record['trimmed']} passed episodes trimmed"
    ]
    temperatures = ", ".join(
        f"{t} ({passed}/{n})" for t, (passed, n) in record.get("explore_temperatures", {}).items()
    )
    if temperatures:
        opened = record.get("curriculum", {}).get("open_to")
        levels = f"; levels 1-{opened} open" if opened else ""
        lines.append(f"  explored at temperature {temperatures}{levels}")
    envs = record.get("curriculum", {}).get("envs", {})
    if envs:
        lines.append("  training tasks by env: " + ", ".join(f"{e} {n}" for e, n in envs.items()))
    lines.extend(exploration_lines(record.get("exploration", {})))
    if phases := record.get("seconds_by_phase"):
        lines.append(phase_line(phases))
    for candidate in record["candidates"]:
        if candidate["version"] is None:
            lines.append(f"  {candidate['lever']}: {candidate['reason']}")
        else:
            verdict = "ACCEPTED" if candidate["accepted"] else "rejected"
            lines.append(
                f"  {candidate['lever']} -> {candidate['version']}: {verdict}, "
                f"{candidate['reason']}"
            )
    for lever, counts in record.get("proposed_tasks", {}).items():
        turned = ", ".join(f"{n} {reason}" for reason, n in counts["rejected"].items())
        lines.append(
            f"  {lever}: {counts['accepted']} new training tasks, "
            f"{sum(counts['rejected'].values())} proposals rejected"
            + (f" ({turned})" if turned else "")
        )
    return "\n".join(lines)


def phase_line(phases: dict[str, Any]) -> str:
    """Where a round's time went, as one log line (see ``seconds_by_phase`` in the round)."""
    proposals = phases.get("proposals", {})
    each = ", ".join(f"{lever} {_minutes(s)}" for lever, s in proposals.items())
    parts = [
        f"practice {_minutes(phases['practice'])}",
        f"proposals {_minutes(sum(proposals.values()))}" + (f" ({each})" if each else ""),
        f"gate {_minutes(phases['gate'])}",
    ]
    if "test" in phases:
        parts.append(f"test {_minutes(phases['test'])}")
    return "  time: " + ", ".join(parts)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def exploration_lines(record: dict[str, Any]) -> list[str]:
    """What a round's search did, as log lines (see :class:`~ratchet.improve.explore.Explored`)."""
    if not record.get("branches"):
        return []
    lines = [
        f"  search: {record['searched']} unsolved tasks, {record['branches']} branches, "
        f"{record['solved']} tasks solved"
        + ("" if record.get("deterministic", True) else " (env not deterministic: sampling)")
    ]
    for name, levels in record.get("strategies", {}).items():
        parts = ", ".join(_yield_text(level, counts) for level, counts in levels.items())
        lines.append(f"    {name}: {parts}")
    return lines


def _yield_text(level: str, counts: list[int]) -> str:
    """``L2 1/55 +10 relabelled (2,900 tokens)``; runs before relabels counted keep three counts."""
    branches, passed, tokens, *rest = counts
    relabelled = f" +{rest[0]} relabelled" if rest and rest[0] else ""
    return f"L{level} {passed}/{branches}{relabelled} ({tokens:,} tokens)"


def summary(run: RunDir, env: Env) -> dict[str, Any]:
    """``summary.json``: base and final test metrics, every round, cost and settings."""
    final = run.incumbent()
    tests = run.tests

    def headline(version: str) -> dict[str, Any]:
        metrics = tests[version]
        kept = (*HEADLINE_KEYS, "by_difficulty", "by_env")
        return {key: metrics[key] for key in kept if key in metrics}

    privileged = {
        agent.version: agent.notes["privileged"]
        for agent in run.lineage(final.version)
        if "privileged" in agent.notes
    }
    return {
        "env": env.name,
        "env_version": env.version,
        "model": run.config.model,
        "levers": list(run.config.levers),
        "run_id": run.run_id,
        "final_version": final.version,
        # Versions on the final agent's lineage that learned from outside demonstrations:
        # when there are any, base -> final is not self-improvement.
        "privileged": privileged,
        "self_improvement": not privileged,
        "base": headline("base"),
        "final": headline(final.version),
        "tested": {version: headline(version) for version in tests},
        "rounds": run.rounds,
        "seconds": run.seconds,
        "tokens": run.tokens,
        "rollouts": run.episode_count(),
        "model_errors": run.model_errors,
        # Red-team findings accepted knowingly for the env's verifier: passes may exploit them.
        "accepted_findings": accepted_findings_of(env),
        "config": to_dict(run.config),
    }
