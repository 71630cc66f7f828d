"""Grid goals: what a task asks for, how it reads, and how the world's state is judged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ratchet.envs.grid.world import ABSENT, HELD, RECIPES, Layout, State, article, look

GoalKind = Literal["fetch", "craft", "bring", "go", "unlock"]
GOAL_KINDS: tuple[GoalKind, ...] = get_args(GoalKind)


@dataclass(frozen=True)
class Goal:
    """One goal, by index into a :class:`~ratchet.envs.grid.world.Layout`.

    Attributes:
        kind: ``fetch`` (hold an item), ``craft`` (hold a crafted item), ``bring`` (an item lies
            on a room's floor), ``go`` (stand in a room) or ``unlock`` (a door's lock is open).
        item: The item, for ``fetch``, ``craft`` and ``bring``.
        room: The room, for ``bring`` and ``go``.
        door: The door, for ``unlock``.
    """

    kind: GoalKind
    item: int = -1
    room: int = -1
    door: int = -1


def goal_from_params(layout: Layout, params: Mapping[str, Any]) -> Goal:
    """Read a task's ``goal`` param (names, as :func:`goal_to_params` writes them).

    Raises:
        ValueError: If the goal is malformed or names something the world lacks.
    """
    try:
        data = params["goal"]
        kind = data["kind"]
        rooms = {name: i for i, name in enumerate(layout.rooms)}
        if kind in ("fetch", "craft"):
            return Goal(kind, item=layout.item_index[data["item"]])
        if kind == "bring":
            return Goal(kind, item=layout.item_index[data["item"]], room=rooms[data["room"]])
        if kind == "go":
            return Goal(kind, room=rooms[data["room"]])
        if kind == "unlock":
            pair = {rooms[data["rooms"][0]], rooms[data["rooms"][1]]}
            return Goal(kind, door=next(d for d, ab in enumerate(layout.doors) if set(ab) == pair))
    except (KeyError, TypeError, IndexError, StopIteration) as exc:
        raise ValueError(f"grid goal is malformed: {type(exc).__name__}: {exc}") from None
    raise ValueError(f"grid goal kind must be one of {', '.join(GOAL_KINDS)}; got {kind!r}")


def goal_to_params(layout: Layout, goal: Goal) -> dict[str, Any]:
    """Return the goal as JSON-serialisable names (the ``goal`` param of a task)."""
    if goal.kind in ("fetch", "craft"):
        return {"kind": goal.kind, "item": layout.items[goal.item]}
    if goal.kind == "bring":
        return {"kind": goal.kind, "item": layout.items[goal.item], "room": layout.rooms[goal.room]}
    if goal.kind == "go":
        return {"kind": goal.kind, "room": layout.rooms[goal.room]}
    a, b = layout.doors[goal.door]
    return {"kind": goal.kind, "rooms": [layout.rooms[a], layout.rooms[b]]}


def instruction(layout: Layout, start: State, goal: Goal) -> str:
    """Return the text the agent sees: the starting room as ``look`` shows it, then the goal.

    Showing the first room up front spares a ``look`` and puts the names of the doors and items
    at hand, which is what a one-action task needs.
    """
    item = layout.items[goal.item] if goal.item >= 0 else ""
    if goal.kind == "fetch":
        wants = f"Find the {item} and pick it up."
    elif goal.kind == "craft":
        wants = f"Craft {article(item)} and keep it in your inventory."
    elif goal.kind == "bring":
        wants = f"Bring the {item} to {layout.room_name(goal.room)} and drop it there."
    elif goal.kind == "go":
        wants = f"Go to {layout.room_name(goal.room)}."
    else:
        a, b = layout.doors[goal.door]
        wants = f"Unlock the door between {layout.room_name(a)} and {layout.room_name(b)}."
    return f"{look(layout, start)} {wants} Call finish when you are done."


def achieved(goal: Goal, state: State) -> bool:
    """Whether ``state`` satisfies ``goal``."""
    if goal.kind in ("fetch", "craft"):
        return state.places[goal.item] == HELD
    if goal.kind == "bring":
        return state.places[goal.item] == goal.room
    if goal.kind == "go":
        return state.room == goal.room
    return bool(state.unlocked >> goal.door & 1)


def judge(layout: Layout, state: State, goal: Goal) -> tuple[bool, str]:
    """Judge the final state: whether the goal holds, and a sentence saying what was found."""
    passed = achieved(goal, state)
    if goal.kind == "go":
        where = layout.room_name(state.room)
        return passed, f"you are in {where}; the goal is {layout.room_name(goal.room)}"
    if goal.kind == "unlock":
        a, b = (layout.room_name(r) for r in layout.doors[goal.door])
        status = "unlocked" if passed else "still locked"
        return passed, f"the door between {a} and {b} is {status}"
    item = layout.items[goal.item]
    place = state.places[goal.item]
    if place == HELD:
        found = f"the {item} is in your inventory"
    elif place == ABSENT:
        made = "was never crafted or was used up" if item in RECIPES else "was used up in crafting"
        found = f"the {item} {made}"
    else:
        found = f"the {item} lies in {layout.room_name(place)}"
    if goal.kind == "bring":
        return passed, f"{found}; the goal is to leave it in {layout.room_name(goal.room)}"
    return passed, f"{found}; the goal is to hold it"
