"""Reflective prompt evolution (GEPA): the agent's instructions, edited by reflection.

Two texts evolve: the system prompt and the agent's guidance for this env. A reflector model
reads a minibatch of training episodes played with the current texts (each with the verifier's
feedback) and rewrites one text; the rewrite is played on the same minibatch and, if it does
better, on a fixed set of training tasks over which a Pareto front is kept (a candidate that is
best on any task survives), candidates on the front are merged, and the one with the best mean
goes to the gate. The optimisation engine is the ``gepa`` package's: this module is its adapter
(:class:`RatchetAdapter`) and the lever around it. Episodes are played with the incumbent's
weights on training tasks only, through ``context.play``, so they are stored with the run and
count in its cost.

Two known failures of such optimisers are guarded against. A rewrite that copies a
task-specific value (a number, name or id from the training tasks) memorises tasks instead of
teaching, and is rejected, as the insights lever does; so is one longer than
``max_prompt_chars``. The reflection prompt is built within ``max_reflection_chars`` however
long the texts and episodes grow.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from ratchet.core.agent import Agent
from ratchet.core.task import Task
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import parse_action
from ratchet.engine.models.base import Model, Prompt, Sampling
from ratchet.improve.levers.base import LeverContext, NoCandidate
from ratchet.improve.levers.insights import copied_values, specific_values, transcript

if TYPE_CHECKING:
    from gepa.core.adapter import EvaluationBatch, GEPAAdapter
    from gepa.core.result import GEPAResult

SYSTEM, GUIDANCE = "system_prompt", "guidance"

REFLECT_PROMPT = (
    "You improve the instructions of an agent that solves tasks by calling tools. You see the "
    "current text and episodes the agent played with it, each with the verifier's feedback. "
    "Rewrite the text so the agent avoids the failures and keeps what worked. Be general: "
    "never mention specific numbers, names or ids from the tasks. Reply by calling rewrite."
)
_WHAT = {
    SYSTEM: "the agent's system prompt",
    GUIDANCE: "the agent's guidance for this kind of task (added to its system prompt)",
}


@dataclass(frozen=True)
class PromptLever:
    """Propose the incumbent with a system prompt and env guidance evolved by GEPA.

    Attributes:
        budget: Most episodes the optimiser may play per proposal.
        train_tasks: Training tasks whose episodes are reflected on (in minibatches).
        front_tasks: Training tasks the Pareto front is kept over.
        minibatch: Episodes per reflection.
        max_prompt_chars: Longest text a rewrite may have.
        max_reflection_chars: Largest reflection prompt (texts and episodes are cut to fit).
        max_reply_tokens: Cap on each reflector reply.
    """

    budget: int = 48
    train_tasks: int = 8
    front_tasks: int = 8
    minibatch: int = 3
    max_prompt_chars: int = 1200
    max_reflection_chars: int = 6000
    max_reply_tokens: int = 400
    name: str = "prompt"

    def propose(self, context: LeverContext) -> Agent | None:
        """Return the candidate, or ``None`` if nothing beat the incumbent's texts on training.

        Raises:
            ValueError: If the ``gepa`` package is not installed.
        """
        reflector = context.reflector or context.model
        tasks = training_tasks(context.experience, context.env.name, context.seed)
        if reflector is None or context.play is None:
            return None
        if len(tasks) < 2:
            raise NoCandidate("fewer than two training tasks to reflect on")
        try:
            from gepa.api import optimize
        except ImportError:
            raise ValueError(
                "the prompt lever needs the gepa package: pip install 'ratchet[prompt]'"
            ) from None
        reflect = tasks[: self.train_tasks]
        front = tasks[self.train_tasks : self.train_tasks + self.front_tasks] or reflect
        incumbent = context.incumbent
        seed = {
            SYSTEM: incumbent.system_prompt,
            GUIDANCE: incumbent.guidance.get(context.env.name, ""),
        }
        adapter = RatchetAdapter(self, context, reflector, specific_values(context.experience))
        result: GEPAResult[Trajectory, int] = optimize(
            seed_candidate=seed,
            trainset=reflect,
            valset=front,
            # gepa's protocol declares propose_new_texts a settable attribute; a method is what
            # its engine calls, so the class matches in behaviour but not in mypy's eyes.
            adapter=cast("GEPAAdapter[Task, Trajectory, Trajectory]", adapter),
            candidate_selection_strategy="pareto",
            frontier_type="instance",
            reflection_minibatch_size=min(self.minibatch, len(reflect)),
            use_merge=True,
            max_merge_invocations=2,
            max_metric_calls=self.budget,
            logger=_Quiet(),
            seed=context.seed,
            track_best_outputs=False,
        )
        best = dict(result.best_candidate) if isinstance(result.best_candidate, dict) else seed
        if best == seed:
            rejected = ", ".join(f"{n} {why}" for why, n in sorted(adapter.rejected.items()))
            raise NoCandidate(
                f"{len(result.candidates) - 1} rewrites kept, none beat the incumbent's texts "
                f"on {len(front)} training tasks"
                + (f"; turned away: {rejected}" if rejected else "")
            )
        guidance = {**incumbent.guidance, context.env.name: best[GUIDANCE]}
        return incumbent.derive(
            context.version,
            self.name,
            system_prompt=best[SYSTEM],
            guidance={env: text for env, text in guidance.items() if text},
            notes={
                "candidates": len(result.candidates),
                "front_scores": [round(s, 4) for s in result.val_aggregate_scores],
                "episodes": result.total_metric_calls,
                "rewrites_rejected": dict(sorted(adapter.rejected.items())),
            },
        )


def training_tasks(experience: Sequence[Trajectory], env: str, seed: int) -> list[Task]:
    """Distinct training tasks of ``env`` the agents played, failed ones first, shuffled."""
    tasks: dict[str, Task] = {}
    failed: set[str] = set()
    for trajectory in experience:
        if trajectory.task.env == env and trajectory.task.split == "train":
            tasks.setdefault(trajectory.task.id, trajectory.task)
            if not trajectory.passed:
                failed.add(trajectory.task.id)
    ordered = sorted(tasks.values(), key=lambda t: t.id)
    random.Random(seed).shuffle(ordered)
    return sorted(ordered, key=lambda t: t.id not in failed)


class RatchetAdapter:
    """The ``gepa`` adapter: plays candidates' texts as agents, reflects with the reflector.

    Args:
        lever: The lever's settings.
        context: The proposal's context (its ``play`` runs the episodes).
        reflector: The model that rewrites texts.
        specific: Values a rewrite must not copy (see
            :func:`~ratchet.improve.levers.insights.specific_values`).

    Attributes:
        rejected: Rewrites turned away, by reason.
    """

    def __init__(
        self, lever: PromptLever, context: LeverContext, reflector: Model, specific: set[str]
    ) -> None:
        self.lever, self.context, self.reflector, self.specific = (
            lever,
            context,
            reflector,
            specific,
        )
        self.rejected: Counter[str] = Counter()
        self._drafts: dict[tuple[str, str], str] = {}
        self._reflections = 0

    def evaluate(
        self, batch: list[Task], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch[Trajectory, Trajectory]:
        """Play ``candidate``'s texts on ``batch``; each episode's score is its verdict's."""
        from gepa.core.adapter import EvaluationBatch

        assert self.context.play is not None
        key = (candidate[SYSTEM], candidate[GUIDANCE])
        draft = self._drafts.setdefault(key, f"{self.context.version}-draft{len(self._drafts)}")
        env = self.context.env.name
        agent = replace(
            self.context.incumbent,
            version=draft,
            system_prompt=candidate[SYSTEM],
            guidance={**self.context.incumbent.guidance, env: candidate[GUIDANCE]},
        )
        played = self.context.play(agent, batch, 1)
        return EvaluationBatch(
            outputs=played,
            scores=[t.score for t in played],
            trajectories=played if capture_traces else None,
        )

    def make_reflective_dataset(
        self,
        candidate: dict[str, str],
        eval_batch: EvaluationBatch[Trajectory, Trajectory],
        components_to_update: list[str],
    ) -> dict[str, list[dict[str, Any]]]:
        """One record per episode: the task, what the agent did, and the verifier's verdict."""
        records = []
        for trajectory in eval_batch.trajectories or []:
            verdict = trajectory.verdict.feedback if trajectory.verdict else trajectory.error
            records.append(
                {
                    "Episode": transcript(trajectory, max_chars=1000),
                    "Feedback": f"{'passed' if trajectory.passed else 'failed'}: {verdict}",
                }
            )
        return {component: records for component in components_to_update}

    def propose_new_texts(
        self,
        candidate: dict[str, str],
        reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
        components_to_update: list[str],
    ) -> dict[str, str]:
        """Ask the reflector to rewrite each component; keep the rewrites that pass the guards."""
        rewrites = {}
        for component in components_to_update:
            prompt = self.reflection_prompt(
                component, candidate[component], reflective_dataset.get(component, ())
            )
            self._reflections += 1
            sampling = Sampling(
                0.7, self.lever.max_reply_tokens, self.context.seed + self._reflections
            )
            reply = self.reflector.complete([prompt], sampling)[0]
            action = parse_action(reply)
            if isinstance(action, str) or action.name != "rewrite":
                self.rejected["no rewrite"] += 1
                continue
            text = str(action.arguments.get("text", "")).strip()
            reason = self.check(text, candidate[component])
            if reason is not None:
                self.rejected[reason] += 1
                continue
            rewrites[component] = text
        return rewrites

    def check(self, text: str, current: str) -> str | None:
        """Why a rewrite is rejected (``None`` if it is not)."""
        if not text or text == current.strip():
            return "empty or unchanged"
        if len(text) > self.lever.max_prompt_chars:
            return "too long"
        if copied_values(text, self.specific) - copied_values(current, self.specific):
            return "copies task values"
        return None

    def reflection_prompt(
        self, component: str, current: str, records: Sequence[Mapping[str, Any]]
    ) -> Prompt:
        """The reflector's prompt, within ``max_reflection_chars`` whatever its inputs' size."""
        budget = self.lever.max_reflection_chars
        shown = current[: min(self.lever.max_prompt_chars, budget // 3)] or "(empty)"
        text = f"Current text ({_WHAT.get(component, component)}):\n{shown}\n\nEpisodes:\n"
        for number, record in enumerate(records, start=1):
            episode, feedback = str(record.get("Episode", "")), str(record.get("Feedback", ""))
            # Each episode gets at most a quarter of the budget, so several fit side by side.
            entry = f"{number}. {episode[: budget // 5]}\n{feedback[: budget // 20]}\n"
            if len(text) + len(entry) > budget:
                break
            text += entry
        tool = {
            "type": "function",
            "function": {
                "name": "rewrite",
                "description": "Submit the new text.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "maxLength": self.lever.max_prompt_chars}
                    },
                    "required": ["text"],
                    "additionalProperties": False,
                },
            },
        }
        messages = (
            {"role": "system", "content": REFLECT_PROMPT},
            {"role": "user", "content": text[:budget]},
        )
        return Prompt(messages, (tool,))


class _Quiet:
    """A ``gepa`` logger that drops its messages (the loop reports what matters)."""

    def log(self, message: str) -> None:
        """Drop ``message``."""
