"""One exploring episode: replay a node's prefix, branch with a new action, go on with the policy.

A :class:`Branch` is the engine's :class:`~ratchet.engine.rollout.Steering` for one training
episode. Its world is restored by replaying the parent's replies on a fresh session (the env is
deterministic, which ``ratchet check`` tests); the replayed turns cost no model call, and their
observations are compared with the parent's, so an env that is not deterministic shows itself.
At the branching turn the agent's own policy proposes an action that differs from every action
already taken there (:func:`~.strategies.action_key`): where the strategy copies arguments the
decoder offers untried calls only (:mod:`.untried`); a repeat is sampled again, a little
hotter, up to ``tries`` times, and then made to call a tool not tried there. From then on the
episode plays on under its strategy (:mod:`.strategies`). A root is a branch with nothing to
replay and nothing tried.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from ratchet.core.env import FINISH
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Exploration
from ratchet.engine.harness import Policy, parse_action
from ratchet.engine.models.base import Completion, Prompt
from ratchet.engine.rollout import SteeredPolicy
from ratchet.improve import seeds
from ratchet.improve.explore.strategies import (
    FINISH_KEY,
    POLICY,
    Strategy,
    Track,
    call_key,
    callable_tools,
    drawn_tool,
    finish_answers,
    reply_tools,
    takes_arguments,
    tried_calls,
    tried_tools,
)


@dataclass(frozen=True)
class Branch:
    """How one exploring episode plays (see the module); pickles, for Ray workers.

    Attributes:
        strategy: The strategy that constrains the replies from the branching turn on.
        temperature: Sampling temperature of the generated replies (``None``: the agent's).
        replies: The parent's replies to replay, one per turn before the branching turn.
        seen: What the parent's world answered to each of ``replies``.
        tried: Canonical actions already taken at the branching turn (by the parent and
            earlier branches), which the new action must differ from.
        answers: The ``finish`` answers already given at the branching turn, which a
            closing branch (the ``close`` strategy) must differ from.
        parent: The sample the replies come from (``None`` for a root).
        instruction: The task's instruction (a drawn tool is drawn among those it names).
        shared: Text every task of the env shows (its policy), never copied from.
        draw: This branch's own number: seeds its resamples and draws its drawn tool.
        tries: Samples of the branching action before it is made to call an untried tool.
        heat: Temperature added to each resample of the branching action.
    """

    strategy: Strategy = POLICY
    temperature: float | None = None
    replies: tuple[Completion, ...] = ()
    seen: tuple[str, ...] = ()
    tried: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()
    parent: int | None = None
    instruction: str = ""
    shared: str = ""
    draw: int = 0
    tries: int = 3
    heat: float = 0.3

    def wrap(self, policy: Policy) -> SteeredPolicy:
        """The episode's policy: replay, branch, then ``policy`` under the strategy."""
        return _Branching(self, policy)


@dataclass
class _Branching:
    """The state of one branch while its episode is played."""

    branch: Branch
    inner: Policy
    track: Track = field(default_factory=Track)
    matched: bool = True
    distinct: bool = True
    discarded_tokens: int = 0

    def __call__(self, prompt: Prompt, turn: int) -> Completion:
        branch = self.branch
        self._compare(prompt, turn)
        if turn < len(branch.replies):
            replayed = branch.replies[turn]
            if isinstance(call := parse_action(replayed), ToolCall):
                self.track.spend(call)
            return replayed
        strategy = branch.strategy
        if turn == len(branch.replies) and (branch.tried or strategy.drawn_tool or strategy.closes):
            completion = self._branch(prompt, turn)
        else:
            completion = self._sample(prompt, turn)
        if isinstance(call := parse_action(completion), ToolCall):
            self.track.record(prompt, call)
        return completion

    def record(self) -> Exploration:
        branch = self.branch
        return Exploration(
            strategy=branch.strategy.name,
            temperature=branch.temperature,
            parent=branch.parent,
            branch_turn=len(branch.replies),
            distinct=self.distinct,
            replay_matched=self.matched,
            discarded_tokens=self.discarded_tokens,
        )

    def _compare(self, prompt: Prompt, turn: int) -> None:
        """Note whether the world answered the last replayed reply as it answered the parent."""
        if 0 < turn <= len(self.branch.seen) and prompt.messages:
            answer = prompt.messages[-1].get("content")
            self.matched &= answer == self.branch.seen[turn - 1]

    def _branch(self, prompt: Prompt, turn: int) -> Completion:
        """An action at the branching turn unlike every one ``tried`` there, if one is found."""
        branch = self.branch
        tried = set(branch.tried)
        # A finish or an argument-free call is the same action whatever else it carries.
        avoid = {name for name in tried_tools(branch.tried) if not takes_arguments(prompt, name)}
        if FINISH_KEY in tried:
            avoid.add(FINISH)
        tool = FINISH if branch.strategy.closes else None
        if branch.strategy.drawn_tool:
            tools = callable_tools(prompt)
            fresh = {n: d for n, d in tools.items() if n not in tried_tools(branch.tried)}
            if fresh or tools:
                tool = drawn_tool(fresh or tools, branch.instruction, branch.draw)
        completion = Completion("")
        for attempt in range(branch.tries + 1):
            if attempt == branch.tries:
                # Resampling kept finding tried actions: leave out every tool tried here.
                avoid |= tried_tools(branch.tried)
            completion = self._sample(prompt, turn, frozenset(avoid), tool, attempt)
            if self._distinct(completion, tried):
                return completion
            self.discarded_tokens += completion.completion_tokens
        self.distinct = False
        return completion

    def _distinct(self, completion: Completion, tried: set[str]) -> bool:
        """Whether ``completion`` is a new action here: for a closing branch, a new answer."""
        action = parse_action(completion)
        if self.branch.strategy.closes and isinstance(action, ToolCall) and action.name == FINISH:
            return not set(finish_answers(action)) & set(self.branch.answers)
        return _key(completion) not in tried

    def _sample(
        self,
        prompt: Prompt,
        turn: int,
        avoid: frozenset[str] = frozenset(),
        tool: str | None = None,
        attempt: int = 0,
    ) -> Completion:
        branch = self.branch
        temperature = branch.temperature
        if temperature is not None:
            temperature += branch.heat * attempt
        branching = turn == len(branch.replies)
        prompt = replace(
            prompt,
            reply_tools=reply_tools(
                branch.strategy,
                prompt,
                self.track,
                avoid,
                tool,
                branch.shared,
                branch.answers if branch.strategy.closes and branching else (),
                tried_calls(branch.tried) if branching else None,
            ),
            temperature=temperature,
            # The first attempt samples with the episode's own seed; a resample with another.
            seed=None if attempt == 0 else seeds.resample(branch.draw, turn, attempt),
        )
        return self.inner(prompt, turn)


def _key(completion: Completion) -> str:
    """The canonical action of a reply (see :func:`~.strategies.action_key`)."""
    action = parse_action(completion)
    if isinstance(action, ToolCall):
        return call_key(action)
    return json.dumps(["", completion.text])
