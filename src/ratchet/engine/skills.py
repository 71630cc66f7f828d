"""Skills as tools: offering an agent's skills in an episode, and running a skill call.

A skill (:class:`~ratchet.core.memory.Skill`) is data: a list of calls of the env's own tools.
:func:`offer` adds the schemas of the skills a session can run to the tools on offer;
:func:`play_call` runs one call, and when it names a skill, expands it into the underlying
calls, each made through the session exactly as if the model had made it, so the env's own
validation, sandbox and verifier apply unchanged. A step that errors stops the skill and the
error comes back as the call's observation (the episode goes on); the steps made are returned
so the trajectory records both the skill call and the calls beneath it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ratchet.core.env import Session
from ratchet.core.memory import Skill
from ratchet.core.tool import ToolCall, ToolError
from ratchet.core.trajectory import Observation, Step, error_observation


def offer(
    tools: Sequence[dict[str, Any]], skills: Sequence[Skill]
) -> tuple[tuple[dict[str, Any], ...], dict[str, Skill]]:
    """Return the tools on offer with the runnable skills added, and those skills by name.

    A skill is offered only if every tool it calls is on offer and its name is not already
    taken (by a tool or an earlier skill).
    """
    names = {tool.get("function", tool).get("name") for tool in tools}
    offered: dict[str, Skill] = {}
    for skill in skills:
        if skill.name in names or skill.name in offered or not set(skill.tools) <= names:
            continue
        offered[skill.name] = skill
    return (*tools, *(skill.tool().schema() for skill in offered.values())), offered


def play_call(
    session: Session, call: ToolCall, skills: Mapping[str, Skill]
) -> tuple[Observation, tuple[Step, ...]]:
    """Run ``call`` in ``session``: a tool call directly, a skill call step by step.

    Returns:
        The observation for the call and, for a skill, the steps it made (else ``()``).
    """
    skill = skills.get(call.name)
    if skill is None:
        return session.step(call), ()
    try:
        skill.tool().validate(call.arguments)
    except ToolError as exc:
        return error_observation(str(exc)), ()
    steps: list[Step] = []
    for number, planned in enumerate(skill.steps, start=1):
        try:
            arguments = {
                name: bind(source, call.arguments, steps)
                for name, source in planned.arguments.items()
            }
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            message = f"skill {skill.name} stopped at step {number} ({planned.tool}): {exc}"
            return error_observation(message), tuple(steps)
        inner = ToolCall(planned.tool, arguments, id=f"{call.id}.{number}")
        observation = session.step(inner)
        steps.append(Step(inner, observation))
        if observation.error is not None:
            message = (
                f"skill {skill.name} stopped at step {number} ({planned.tool}): {observation.error}"
            )
            return error_observation(message, done=observation.done), tuple(steps)
        if observation.done:
            break
    return _summary(steps), tuple(steps)


def bind(source: Mapping[str, Any], arguments: Mapping[str, Any], steps: Sequence[Step]) -> Any:
    """The value an argument of a skill step takes (see :class:`~ratchet.core.memory.SkillStep`).

    Args:
        source: Where the value comes from.
        arguments: The skill call's arguments (its parameters).
        steps: The skill's steps made so far.

    Raises:
        KeyError: A parameter or a result field is missing.
        IndexError: The step referred to has not run.
    """
    if "value" in source:
        return source["value"]
    if "param" in source:
        return arguments[source["param"]]
    index = int(source["result"])
    if not 0 <= index < len(steps):
        raise IndexError(f"step {index + 1} has not run")
    text = steps[index].observation.text
    if "field" not in source:
        return parse_result(text) if source.get("json") else text
    result = parse_result(text)
    if not isinstance(result, dict) or source["field"] not in result:
        raise KeyError(f"the result of step {index + 1} has no field {source['field']!r}")
    return result[source["field"]]


def parse_result(text: str) -> Any:
    """A tool result as a value: its JSON when it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _summary(steps: Sequence[Step]) -> Observation:
    """One observation for a finished skill: each call and its result, the last one's state."""
    last = steps[-1].observation
    if len(steps) == 1:
        return last
    lines = [
        f"{step.call.name}({json.dumps(step.call.arguments, sort_keys=True)}) -> "
        f"{step.observation.text}"
        for step in steps
        if step.call is not None
    ]
    return Observation(
        "\n".join(lines), done=last.done, terminated=last.terminated, truncated=last.truncated
    )
