"""Learning from failures: DPO on actions that parted a success from a failure at one state.

The k samples of a task start in the same world. Where a passed and a failed episode of the
same task made the same calls with the same results up to some turn and then acted differently,
that turn is a state at which one action led to success and the other to failure: a preference
pair (chosen: the success's action; rejected: the failure's), with the conversation so far as
the prompt. The trainer's DPO loss (:meth:`~ratchet.engine.models.base.Trainer.dpo`) raises the
chosen action over the rejected one relative to the incumbent, which is the reference and the
starting point (its adapter is continued). Hindsight replays are left out: they are successes
of other tasks, with no sibling samples.

Pairs sit where the samples differ, which is where the incumbent is unsure: on a level it has
mastered no sample fails and nothing holds its actions there while the pairs move the policy
(pairs mined at calc's level 2, "a second call over `finish`", unlearned level 1's `finish`).
With ``anchor_weight`` the verified episodes ``rft`` would train on (hindsight replays
included) join the loss as an SFT term and hold those states.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ratchet.core.agent import Agent
from ratchet.core.trajectory import Step, Trajectory
from ratchet.engine.models.base import Preference
from ratchet.improve.levers.base import LeverContext, NoCandidate
from ratchet.improve.levers.rft import newest_lessons
from ratchet.improve.levers.weights import (
    ADAPTER_DIR,
    adapter_candidate,
    as_prompted,
    incumbent_adapter,
    lora_settings,
    played,
    refuse_bad_depth,
    trainer_of,
)


def groups(episodes: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    """Episodes by task id, in the order given."""
    found: dict[str, list[Trajectory]] = defaultdict(list)
    for episode in episodes:
        found[episode.task.id].append(episode)
    return dict(found)


def _action(step: Step) -> str:
    if step.call is None:
        return json.dumps(["", step.output])
    return json.dumps([step.call.name, step.call.arguments], sort_keys=True)


def _assistant_messages(trajectory: Trajectory) -> list[int]:
    """Where the episode's own assistant turns are (demonstrations shown before it aside)."""
    return [
        i
        for i, m in enumerate(trajectory.messages)
        if m.get("role") == "assistant" and not m.get("demonstration")
    ]


def parting(success: Trajectory, failure: Trajectory) -> Preference | None:
    """The pair at the first turn where ``success`` and ``failure`` acted differently.

    ``None`` when they never did (one stopped first) or their worlds answered the same action
    differently before they parted (then the states were not the same).
    """
    for turn, (good, bad) in enumerate(zip(success.steps, failure.steps, strict=False)):
        if _action(good) == _action(bad):
            if good.observation.text != bad.observation.text:
                return None
            continue
        positions = (_assistant_messages(success), _assistant_messages(failure))
        if turn >= min(len(p) for p in positions):
            return None
        at = positions[0][turn]
        return Preference(
            messages=success.messages[:at],
            tools=success.tools,
            chosen=success.messages[at],
            rejected=failure.messages[positions[1][turn]],
            task_id=success.task.id,
            turn=turn,
        )
    return None


def mine_pairs(grouped: dict[str, list[Trajectory]], limit: int) -> list[Preference]:
    """Every distinct pair from tasks with both a passed and a failed sample, newest tasks first.

    Args:
        grouped: Samples per task (see :func:`groups`).
        limit: Most pairs returned.
    """
    found: dict[str, Preference] = {}
    for samples in reversed(list(grouped.values())):
        successes = [t for t in samples if t.passed]
        failures = [t for t in samples if not t.passed]
        for success in successes:
            for failure in failures:
                pair = parting(success, failure)
                if pair is None:
                    continue
                key = json.dumps([pair.task_id, pair.turn, pair.chosen, pair.rejected], default=str)
                found.setdefault(key, pair)
                if len(found) >= limit:
                    return list(found.values())[:limit]
    return list(found.values())[:limit]


@dataclass(frozen=True)
class PairsLever:
    """Propose the incumbent's adapter trained with DPO on pairs mined from its samples.

    Attributes:
        steps: Optimiser steps per proposal.
        batch_size: Pairs per step.
        learning_rate: AdamW learning rate for the adapter.
        beta: DPO's beta: how strongly the policy is held to the incumbent.
        chosen_nll_weight: Weight of the SFT term on each pair's chosen action (see
            :class:`~ratchet.engine.models.base.LoraSettings`); 0 is plain DPO.
        anchor_weight: Weight of the SFT term on the verified episodes (anchors; see
            :class:`~ratchet.engine.models.base.LoraSettings`); 0 trains on the pairs alone.
        lora_rank: LoRA rank of a fresh adapter (a continued one keeps its own).
        lora_depth: Share of the decoder layers, from the top, a fresh adapter is put on (a
            continued one keeps its own).
        max_pairs: Most pairs trained on (from the newest tasks).
        max_anchors: Most verified episodes anchoring them (the newest).
    """

    steps: int = 30
    batch_size: int = 4
    learning_rate: float = 2e-4
    beta: float = 0.1
    chosen_nll_weight: float = 0.0
    anchor_weight: float = 0.0
    lora_rank: int = 16
    lora_depth: float = 1.0
    max_pairs: int = 512
    max_anchors: int = 512
    name: str = "pairs"

    def __post_init__(self) -> None:
        """Refuse a negative loss weight, or a LoRA depth outside ``(0, 1]``.

        Raises:
            ValueError: Naming the lever option.
        """
        for setting in ("chosen_nll_weight", "anchor_weight"):
            weight = getattr(self, setting)
            if weight < 0:
                raise ValueError(
                    f"pairs.{setting} weighs a loss term; it cannot be negative ({weight})"
                )
        refuse_bad_depth(self)

    def propose(self, context: LeverContext) -> Agent | None:
        """Train on the mined pairs and return the candidate, or ``None`` without a pair.

        Raises:
            ValueError: If the incumbent's weights cannot be trained (no trainer).
        """
        trainer = trainer_of(context, self.name)
        own = [t for t in context.experience if played(context, t)]
        real = groups(as_prompted(own, context.incumbent))
        pairs = mine_pairs(real, self.max_pairs)
        if not pairs:
            raise NoCandidate("no task with a success and a failure parting at one action")
        anchors = as_prompted(self.anchors(context.experience, context.env.name), context.incumbent)
        settings = lora_settings(
            self,
            context.seed,
            beta=self.beta,
            chosen_nll_weight=self.chosen_nll_weight,
            anchor_weight=self.anchor_weight,
        )
        out = context.workdir / ADAPTER_DIR
        start = incumbent_adapter(context)
        result = trainer.dpo(pairs, out, settings, start, context.progress, anchors)
        return adapter_candidate(
            context,
            self.name,
            result,
            pairs=len(pairs),
            anchors=len(anchors),
            beta=self.beta,
            chosen_nll_weight=self.chosen_nll_weight,
            anchor_weight=self.anchor_weight,
        )

    def anchors(self, experience: Sequence[Trajectory], env: str) -> list[Trajectory]:
        """The verified episodes that hold the policy where the pairs do not reach.

        None when ``anchor_weight`` is 0, else what ``rft`` would train on (the newest
        ``max_anchors``).
        """
        if not self.anchor_weight:
            return []
        return newest_lessons(experience, env, self.max_anchors)
