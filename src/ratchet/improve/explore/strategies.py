"""Proposal strategies: how an exploring episode's replies are constrained beyond the agent's own.

A strategy never changes what the model reads: it narrows what the decoder lets the reply be
(:attr:`~ratchet.engine.models.base.Prompt.reply_tools`), so a success found with it is still
the model's own reply, token for token, and trains like any other. Each one answers a way a
small model fails to find a longer plan by itself:

- ``policy``: nothing; the agent as it is.
- ``copy``: every free string and number argument is copied from what the conversation showed
  (:mod:`.copying`), for an agent that picks the right tool and invents its arguments.
- ``chain``: copying, and every call after a successful one takes up a value of that result,
  and a value already passed is not passed again (spent), for an agent that, made to go on,
  repeats its first call instead of acting on what it returned.
- ``drawn``: the branching action is a call of a tool drawn among those not yet tried there,
  every second draw among the tools the task names (a word of the tool's name or its
  description's verb), its arguments copied, for an agent that always makes the same call at
  a state.
- ``close``: the branching action is ``finish``, its answer taken up from the last result, at
  a node where an episode went on instead of stopping, for an agent that does the steps of a
  longer plan and then does not stop (one model call a branch);
- ``list``: copying, where a free string may also join up to three short copied values (by
  ``", "`` or a new line; :mod:`.joined`), for an answer or a file that lists several values
  a task asked for together, which no single span of the conversation is;
- ``extend``: ``finish`` is withheld until the branch has made one more acting call than its
  branching one, for plans one step longer than any the agent has finished.

Every strategy but ``policy`` also skips a repeated argument-free call (a ``look`` right after
a ``look`` can only say again what it said). Which strategy steers which branch is the
scheduler's choice (:mod:`.bandit`), by each one's measured yield.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratchet.core.env import FINISH
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Step
from ratchet.engine.models.base import Prompt, tool_name
from ratchet.improve.explore.copying import (
    chain_on,
    conversation_spans,
    copy_only,
    result_spans,
    uses_left,
)
from ratchet.improve.explore.untried import untried_calls


@dataclass(frozen=True)
class Strategy:
    """A way of constraining an exploring episode's replies (see the module).

    Attributes:
        name: How the strategy is recorded and reported.
        copy_arguments: Copy free string and number arguments from the conversation.
        chain: With ``copy_arguments``: a call after a successful one takes up one value of its
            result, and a value passed before is offered again only where mentioned again.
        skip_repeats: Never call a tool that takes no arguments right after calling it.
        drawn_tool: The branching action calls a tool drawn among those not tried there.
        closes: The branching action is ``finish``, at a node where an episode went on instead.
        extend: Acting calls (to tools that take arguments) the episode makes from its
            branching turn on before ``finish`` is offered; 0 offers it at once.
        joins: With ``copy_arguments``: most copied values a free string may join (1: one).
    """

    name: str
    copy_arguments: bool = False
    chain: bool = False
    skip_repeats: bool = False
    drawn_tool: bool = False
    closes: bool = False
    extend: int = 0
    joins: int = 1


POLICY = Strategy("policy")
STRATEGIES: tuple[Strategy, ...] = (
    POLICY,
    Strategy("copy", copy_arguments=True, skip_repeats=True),
    Strategy("chain", copy_arguments=True, chain=True, skip_repeats=True),
    Strategy("drawn", copy_arguments=True, skip_repeats=True, drawn_tool=True),
    Strategy("close", copy_arguments=True, chain=True, closes=True),
    Strategy("list", copy_arguments=True, skip_repeats=True, joins=3),
    Strategy("extend", skip_repeats=True, extend=2),
)
"""The built-in strategies, ``policy`` first."""


def strategy_named(name: str) -> Strategy:
    """The built-in strategy called ``name``.

    Raises:
        ValueError: If there is none.
    """
    for strategy in STRATEGIES:
        if strategy.name == name:
            return strategy
    known = ", ".join(s.name for s in STRATEGIES)
    raise ValueError(f"no exploration strategy {name!r}; known: {known}")


def action_key(step: Step) -> str:
    """A step's action, canonical: the tool and its arguments, or the unparsed text.

    Two replies that call the same tool with the same arguments are one action, however the
    model spelled them; ``finish`` is one action whatever its answer (a second answer at the
    same state is not another plan).
    """
    return call_key(step.call) if step.call is not None else json.dumps(["", step.output])


FINISH_KEY = json.dumps([FINISH])
"""The canonical action of every ``finish`` (see :func:`action_key`)."""


def call_key(call: ToolCall) -> str:
    """A call, canonical (see :func:`action_key`)."""
    if call.name == FINISH:
        return FINISH_KEY
    return json.dumps([call.name, call.arguments], sort_keys=True)


def finish_answers(call: ToolCall) -> list[str]:
    """The values a ``finish`` call answers with, as text; none for another call.

    ``finish`` is one action for branching (:func:`call_key`), but a closing branch tells its
    answers apart (:func:`~.tree.choose`).
    """
    if call.name != FINISH:
        return []
    return [str(value) for value in call.arguments.values()]


@dataclass
class Track:
    """What an exploring episode did since it branched, which later constraints depend on.

    Attributes:
        acted: Acting calls made from the branching turn on (see :func:`takes_arguments`).
        spent: Argument values passed by the episode's calls (for ``chain``'s spending).
    """

    acted: int = 0
    spent: list[object] | None = None

    def record(self, prompt: Prompt, call: ToolCall) -> None:
        """Count ``call``, made in reply to ``prompt``."""
        self.acted += takes_arguments(prompt, call.name)
        self.spend(call)

    def spend(self, call: ToolCall) -> None:
        """Count the values ``call`` passed, without counting it as an action of the branch.

        A replayed call passed its values in this world as surely as a generated one: left
        unspent, ``chain`` offered calc's starting number again after the replayed first
        operation, and every level-2 chain branch redid its arithmetic on it (0 of 36 passed).
        """
        self.spent = [*(self.spent or []), *call.arguments.values()]


def reply_tools(
    strategy: Strategy,
    prompt: Prompt,
    track: Track,
    avoid: frozenset[str] = frozenset(),
    tool: str | None = None,
    shared: str = "",
    answered: Sequence[str] = (),
    tried: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> tuple[dict[str, Any], ...] | None:
    """The tools ``prompt``'s reply may call under ``strategy``; ``None`` when unconstrained.

    Args:
        strategy: The strategy steering the episode.
        prompt: The prompt as the agent would send it.
        track: What the episode did since it branched.
        avoid: Names of tools the reply must not call (at a branching turn: a ``finish`` or an
            argument-free call already tried there). Ignored when it would leave no tool.
        tool: The one tool the reply must call (a drawn branching action), if any.
        shared: Text every task of the env shows (its policy): not this task's data, so never
            copied from (grid's recipe book names every material and product).
        answered: Values already given as ``finish`` answers here, which no copied argument
            takes again.
        tried: Calls already made here, each tool's arguments by its name: with copied
            arguments the reply repeats none of them (see :mod:`.untried`).
    """
    names = [tool] if tool is not None else [n for n in _names(prompt) if n not in avoid]
    if not names:
        names = _names(prompt)
    if track.acted < strategy.extend and tool is None:
        names = [n for n in names if n != FINISH] or names
    if strategy.skip_repeats and (repeated := _repeated(prompt)) is not None:
        names = [n for n in names if n != repeated] or names
    narrowed = len(names) < len(prompt.tools)
    tools = tuple(t for t in prompt.tools if tool_name(t) in set(names))
    if not strategy.copy_arguments:
        return tools if narrowed else None
    copied = _copied_tools(strategy, tools, _own(prompt.messages, shared), track, answered)
    # Where every copied call was tried, the reply is offered them all and resampled.
    return (untried_calls(copied, tried) or copied) if tried else copied


def _copied_tools(
    strategy: Strategy,
    tools: tuple[dict[str, Any], ...],
    messages: list[dict[str, Any]],
    track: Track,
    answered: Sequence[str],
) -> tuple[dict[str, Any], ...]:
    """``tools`` with their arguments copied from ``messages`` (chained, for ``chain``)."""
    if not strategy.chain:
        return copy_only(tools, conversation_spans(messages), strategy.joins)
    left = {span: n for span, n in uses_left(messages, track.spent or []).items()
            if span not in answered}  # fmt: skip
    restricted = copy_only(tools, tuple(left), strategy.joins)
    latest = result_spans(messages)
    if latest is None:
        return restricted
    once = tuple(span for span, uses in left.items() if uses == 1)
    return chain_on(restricted, latest, once)


def _own(messages: Sequence[dict[str, Any]], shared: str) -> list[dict[str, Any]]:
    """``messages`` without the ``shared`` text in them."""
    if not shared:
        return list(messages)
    return [
        {**m, "content": m["content"].replace(shared, "")}
        if isinstance(m.get("content"), str)
        else m
        for m in messages
    ]


def _names(prompt: Prompt) -> list[str]:
    return [tool_name(t) for t in prompt.tools if tool_name(t)]


def takes_arguments(prompt: Prompt, name: str) -> bool:
    """Whether ``prompt``'s tool ``name`` takes arguments (see :func:`acting`)."""
    return acting(prompt.tools, name)


def acting(tools: Sequence[dict[str, Any]], name: str) -> bool:
    """Whether a call of tool ``name`` among ``tools`` acts: the tool takes arguments.

    A call of a tool that takes none only reads the state in every built-in env (grid's
    ``look``, shop's ``list_products``), and ``finish`` ends the episode. ``True`` for a tool
    ``tools`` lack: nothing says that one only reads.
    """
    if name == FINISH:
        return False
    schema = next((t for t in tools if tool_name(t) == name), None)
    if schema is None:
        return True
    return bool(schema.get("function", schema).get("parameters", {}).get("properties"))


def _repeated(prompt: Prompt) -> str | None:
    """The last reply's tool, if it takes no arguments (calling it again says nothing new)."""
    last = next((m for m in reversed(prompt.messages) if m.get("role") == "assistant"), None)
    calls = (last or {}).get("tool_calls") or []
    if not calls:
        return None
    name = calls[0].get("function", {}).get("name")
    if not isinstance(name, str) or name == FINISH or takes_arguments(prompt, name):
        return None
    return name


def callable_tools(prompt: Prompt) -> dict[str, str]:
    """The tools ``prompt`` offers, but ``finish``, each name with its description."""
    functions = (tool.get("function", tool) for tool in prompt.tools)
    return {
        name: str(function.get("description") or "")
        for function, name in zip(functions, map(tool_name, prompt.tools), strict=True)
        if name and name != FINISH
    }


_ARTICLES = frozenset({"a", "an", "the"})


def drawn_tool(tools: Mapping[str, str], instruction: str, draw: int) -> str:
    """A tool for a drawn branching action, drawn by ``draw``.

    A tool is named when a word of its name (``value`` of ``read_value``, for "What is the
    value of 'port' in config/auth.json?") or the first word of its description (``Pick`` of
    grid's ``take``, "Pick up an item ...", for "pick it up") is a word of ``instruction``, in
    any case. Against the oracles' first calls on 40 training tasks a level
    (``bench/tool_naming.py``), every word of a name rather than its first names files' and
    shop's level-1 first tools on 40 of 40 (17 and 0 before; 1.8 of 8 and 4.0 of 14 tools
    named), grid and code as before. An even ``draw`` picks among the named tools, if any; an
    odd one (or any, when none is named) among all ``tools``. Either way the pick is the one
    at ``draw // 2`` (modulo their number) in name order.

    Args:
        tools: The tools to draw from (not empty), each name with its description.
        instruction: The task's instruction.
        draw: The episode's draw (any non-negative integer).
    """
    everything = sorted(tools)
    named = named_tools(tools, instruction)
    pool = named if named and draw % 2 == 0 else everything
    return pool[draw // 2 % len(pool)]


def named_tools(tools: Mapping[str, str], instruction: str) -> list[str]:
    """The tools ``instruction`` names (see :func:`drawn_tool`), in name order.

    Args:
        tools: Each tool's name with its description.
        instruction: The task's instruction.
    """
    words = set(re.findall(r"[a-z]+", instruction.lower()))
    return [name for name in sorted(tools) if _naming_words(name, tools[name]) & words]


def _naming_words(name: str, description: str) -> set[str]:
    """The words a tool is named by: those of its name and the first of its description.

    A description's first word is its verb in a docstring's imperative summary line; one
    that opens with an article ("A tool that ...") would be named by every "a" of a task, and
    so would a name with an article in it.
    """
    words = set(name.lower().split("_")) - _ARTICLES
    first = re.match(r"[A-Za-z]+", description.strip())
    if first is not None and first.group().lower() not in _ARTICLES:
        words.add(first.group().lower())
    return words


def tried_calls(tried: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The calls among canonical actions ``tried``: each tool's arguments, by its name.

    ``finish`` (one action whatever its answer) and unparsed replies are left out.
    """
    calls: dict[str, list[dict[str, Any]]] = {}
    for key in tried:
        decoded = json.loads(key)
        if len(decoded) == 2 and decoded[0] and isinstance(decoded[1], dict):
            calls.setdefault(str(decoded[0]), []).append(decoded[1])
    return calls


def tried_tools(tried: Sequence[str]) -> set[str]:
    """The names of the tools of canonical actions ``tried`` (see :func:`action_key`)."""
    names = set()
    for key in tried:
        decoded = json.loads(key)
        if decoded and decoded[0]:
            names.add(str(decoded[0]))
    return names
