"""Insight memory (ExpeL): rules distilled by a reflector from successes set beside failures.

The reflector sees the current numbered rules and one failed and one successful episode of the
same kind of task, and answers by calling ``update_rules`` with operations ``ADD``, ``EDIT``,
``UPVOTE`` and ``DOWNVOTE``. Rules carry helpful/harmful votes; a rule voted harmful more often
than helpful is dropped, near-duplicates merge into one upvote, the list is capped to the best
rules, and a rule that copies task-specific values (numbers, names, ids seen in training tasks)
is rejected, because it would memorise tasks instead of teaching a skill.
"""

from __future__ import annotations

import difflib
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ratchet.core.agent import Agent
from ratchet.core.memory import Insight
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import parse_action
from ratchet.engine.models.base import Prompt, Sampling
from ratchet.improve.levers.base import LeverContext, NoCandidate

UPDATE_RULES: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "update_rules",
        "description": "Apply edits to the list of rules for solving these tasks.",
        "parameters": {
            "type": "object",
            "properties": {
                "operations": {
                    "type": "array",
                    "maxItems": 3,
                    "items": {
                        "type": "object",
                        "properties": {
                            "op": {"enum": ["ADD", "EDIT", "UPVOTE", "DOWNVOTE"]},
                            "index": {"type": "integer"},
                            "rule": {"type": "string", "maxLength": 200},
                        },
                        "required": ["op", "index", "rule"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["operations"],
            "additionalProperties": False,
        },
    },
}

REFLECT_PROMPT = (
    "You improve an agent that solves tasks with tools. Compare a failed attempt with a "
    "successful one and update the agent's rules: ADD a general rule that would have avoided "
    "the failure, EDIT a rule (by index) to make it more useful, UPVOTE a rule the success "
    "confirms, DOWNVOTE a rule that misled. Rules must be general: never mention specific "
    "numbers, names or ids from the tasks."
)
_SPECIFIC = re.compile(r"[#@]?\w*\d\w*|[A-Z][a-z]+")
_SIMILAR = 0.8


@dataclass(frozen=True)
class InsightLever:
    """Propose the incumbent with rules updated from compared successes and failures.

    Attributes:
        max_rules: Most rules kept.
        reflections: Failure/success pairs reflected on per proposal.
        max_reply_tokens: Cap on each reflector reply.
    """

    max_rules: int = 8
    reflections: int = 6
    max_reply_tokens: int = 200
    name: str = "insights"

    def propose(self, context: LeverContext) -> Agent | None:
        """Return the candidate, or ``None`` if there is no reflector, no pair or no valid edit."""
        reflector = context.reflector or context.model
        pairs = contrast_pairs(context.experience, self.reflections, context.seed)
        if reflector is None:
            raise NoCandidate("no reflector")
        if not pairs:
            raise NoCandidate("no failure to contrast with a success of the same family")
        rules = list(context.incumbent.insights)
        prompts = [self._prompt(rules, failure, success) for failure, success in pairs]
        replies = reflector.complete(prompts, Sampling(0.7, self.max_reply_tokens, context.seed))
        specific = specific_values(context.experience)
        for reply in replies:
            action = parse_action(reply)
            if isinstance(action, str) or action.name != "update_rules":
                continue
            operations = action.arguments.get("operations")
            if isinstance(operations, list):
                rules = apply_operations(rules, operations, specific)
        rules = sorted(rules, key=lambda i: i.helpful - i.harmful, reverse=True)[: self.max_rules]
        if tuple(rules) == context.incumbent.insights:
            raise NoCandidate(f"{len(replies)} reflections, no valid rule edit")
        return context.incumbent.derive(context.version, self.name, insights=tuple(rules))

    def _prompt(self, rules: Sequence[Insight], failure: Trajectory, success: Trajectory) -> Prompt:
        numbered = "\n".join(f"{i}. {r.rule}" for i, r in enumerate(rules)) or "(no rules yet)"
        text = (
            f"Current rules:\n{numbered}\n\nFAILED attempt:\n{transcript(failure)}\n\n"
            f"SUCCESSFUL attempt:\n{transcript(success)}"
        )
        messages = (
            {"role": "system", "content": REFLECT_PROMPT},
            {"role": "user", "content": text},
        )
        return Prompt(messages, (UPDATE_RULES,))


def contrast_pairs(
    experience: Sequence[Trajectory], limit: int, seed: int
) -> list[tuple[Trajectory, Trajectory]]:
    """Pair failures with successes of the same task, else of the same family and difficulty."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    by_kind: dict[tuple[str, int], list[Trajectory]] = defaultdict(list)
    for trajectory in experience:
        if trajectory.passed:
            by_task[trajectory.task.id].append(trajectory)
            by_kind[(trajectory.task.family, trajectory.task.difficulty)].append(trajectory)
    pairs = []
    for failure in (t for t in experience if not t.passed and t.error is None):
        kind = (failure.task.family, failure.task.difficulty)
        matches = by_task.get(failure.task.id) or by_kind.get(kind)
        if matches:
            pairs.append((failure, matches[0]))
    random.Random(seed).shuffle(pairs)
    return pairs[:limit]


def transcript(trajectory: Trajectory, max_chars: int = 1200) -> str:
    """Render an episode compactly: task, each call and its result, the verifier's feedback."""
    lines = [f"Task: {trajectory.task.instruction}"]
    for step in trajectory.steps:
        action = f"{step.call.name}({step.call.arguments})" if step.call else step.output[:80]
        lines.append(f"- {action} -> {step.observation.text[:120]}")
    feedback = trajectory.verdict.feedback if trajectory.verdict else trajectory.error
    lines.append(f"Verifier: {'passed' if trajectory.passed else 'failed'}; {feedback}")
    return "\n".join(lines)[:max_chars]


def specific_values(experience: Sequence[Trajectory]) -> set[str]:
    """Tokens that identify particular training tasks: numbers, ids and proper names."""
    values: set[str] = set()
    for trajectory in experience:
        words = trajectory.task.instruction.split()
        for position, word in enumerate(words):
            for token in _SPECIFIC.findall(word):
                sentence_start = position == 0 or words[position - 1].endswith((".", "?", "!"))
                if token[0].isupper() and sentence_start:
                    continue
                if token.isdigit() and len(token) < 2:
                    continue
                values.add(token.lower())
    return values


def apply_operations(
    rules: list[Insight], operations: list[Any], specific: set[str]
) -> list[Insight]:
    """Apply ExpeL operations to ``rules``, rejecting malformed or task-specific edits."""
    rules = list(rules)
    for operation in operations:
        if not isinstance(operation, dict):
            continue
        op, index, text = operation.get("op"), operation.get("index"), operation.get("rule", "")
        text = " ".join(str(text).split())
        target: int | None = index if isinstance(index, int) and 0 <= index < len(rules) else None
        if op in ("ADD", "EDIT") and not acceptable(text, specific):
            continue
        if op == "ADD":
            twin = next((i for i, r in enumerate(rules) if similar(r.rule, text)), None)
            if twin is None:
                rules.append(Insight(text))
            else:
                rules[twin] = replace(rules[twin], helpful=rules[twin].helpful + 1)
        elif target is None:
            continue
        elif op == "EDIT":
            rules[target] = replace(rules[target], rule=text, helpful=rules[target].helpful + 1)
        elif op == "UPVOTE":
            rules[target] = replace(rules[target], helpful=rules[target].helpful + 1)
        elif op == "DOWNVOTE":
            rules[target] = replace(rules[target], harmful=rules[target].harmful + 1)
    return [r for r in rules if r.helpful >= r.harmful]


def acceptable(rule: str, specific: set[str]) -> bool:
    """Whether a rule is a usable general sentence that copies no task-specific value."""
    if not 10 <= len(rule) <= 200 or len(rule.split()) < 3:
        return False
    return not copied_values(rule, specific)


def copied_values(text: str, specific: set[str]) -> set[str]:
    """The task-specific values (see :func:`specific_values`) that ``text`` mentions."""
    return {token.lower() for token in _SPECIFIC.findall(text)} & specific


def similar(a: str, b: str) -> bool:
    """Whether two rules say nearly the same thing (so they merge into one)."""
    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() >= _SIMILAR
