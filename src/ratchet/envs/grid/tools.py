"""The agent's tools in the grid world: names in, rule functions applied, sentences out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ratchet.envs.grid.world as rules
from ratchet.core.task import Task
from ratchet.core.tool import ToolError
from ratchet.envs.choices import closed
from ratchet.envs.grid.goals import Goal, goal_from_params
from ratchet.envs.grid.world import (
    COLORS,
    DIRECTIONS,
    HELD,
    KEYS,
    RECIPES,
    VOCABULARY,
    Exit,
    Layout,
    State,
)


@dataclass
class World:
    """One episode's world: the fixed layout, the current state, and the goal.

    Attributes:
        layout: What never changes.
        state: What the agent's actions have made of the world so far.
        start: The state the episode began in.
        goal: What the task asks for.
    """

    layout: Layout
    state: State
    start: State
    goal: Goal


def build(task: Task) -> World:
    """Make a fresh world for a grid task.

    Raises:
        ValueError: If the task's params are malformed.
    """
    layout, start = rules.parse(task.params)
    return World(layout, start, start, goal_from_params(layout, task.params))


def tools(world: World) -> list[Callable[..., str]]:
    """Return the tools bound to ``world``: move, look, take, drop, use, craft, inventory.

    Arguments naming a door, an item or a product accept only the names the env's houses can
    have (every colour's room, every item of the env's vocabulary), never only this house's:
    the schemas are part of what the agent reads before it has seen anything, and a list of
    this house's items or rooms would tell it what lies behind doors it has not opened. Every
    tool is offered in every house, for the same reason.
    """

    def move(to: str) -> str:
        """Walk through a door of the room you are in, then see the new room.

        Args:
            to: A direction (north, south, east, west) or the room the door leads to
                (e.g. "blue room").
        """
        exit = _exit(world, to)
        world.state = rules.go(world.layout, world.state, exit)
        return f"You walk {exit.direction}. {rules.look(world.layout, world.state)}"

    def look() -> str:
        """Describe the room you are in: the items on its floor and its doors."""
        return rules.look(world.layout, world.state)

    def take(item: str) -> str:
        """Pick up an item lying in the room you are in.

        Args:
            item: The item's name, e.g. "brass key".
        """
        index = world.layout.item_index.get(item)
        if index is None:
            room = world.layout.room_name(world.state.room)
            raise ToolError(f"there is no {item} in {room}; use look")
        world.state = rules.take(world.layout, world.state, index)
        return f"You pick up the {item}."

    def drop(item: str) -> str:
        """Put a held item on the floor of the room you are in.

        Args:
            item: The item's name.
        """
        index = _held(world, item)
        world.state = rules.drop(world.layout, world.state, index)
        return f"You drop the {item} in {world.layout.room_name(world.state.room)}."

    def use(item: str, target: str) -> str:
        """Use a held item on a door of the room you are in: a key opens a lock of its metal.

        Args:
            item: The held item, e.g. "brass key".
            target: The door, as a direction or the room it leads to (e.g. "north").
        """
        index = _held(world, item)
        exit = _exit(world, target)
        world.state = rules.unlock(world.layout, world.state, index, exit)
        where = world.layout.room_name(exit.room)
        return f"You unlock the door {exit.direction} to {where} with the {item}."

    def craft(item: str) -> str:
        """Make an item from the two held items its recipe needs; they are used up.

        Args:
            item: What to make, e.g. "axe" (see the recipes).
        """
        world.state = rules.craft(world.layout, world.state, item)
        first, second = rules.RECIPES[item]
        return f"You craft {rules.article(item)} from the {first} and the {second}."

    def inventory() -> str:
        """List the items you hold."""
        items = rules.held(world.layout, world.state)
        return f"You hold: {', '.join(items)}." if items else "You hold nothing."

    doors = [*DIRECTIONS, *(f"{color} room" for color in COLORS)]
    return [
        closed(move, to=doors),
        look,
        closed(take, item=VOCABULARY),
        closed(drop, item=VOCABULARY),
        closed(use, item=KEYS, target=doors),
        closed(craft, item=RECIPES),
        inventory,
    ]


def _held(world: World, item: str) -> int:
    index = world.layout.item_index.get(item)
    if index is None or world.state.places[index] != HELD:
        raise ToolError(f"you do not hold the {item}; check your inventory")
    return index


def _exit(world: World, target: str) -> Exit:
    """Return the door of the current room that ``target`` names (a direction or a room)."""
    layout, state = world.layout, world.state
    for exit in layout.exits[state.room]:
        if target in (exit.direction, f"{layout.rooms[exit.room]} room"):
            return exit
    doors = "; ".join(
        f"{e.direction} to {layout.room_name(e.room)}" for e in layout.exits[state.room]
    )
    here = layout.room_name(state.room)
    if target in DIRECTIONS:
        raise ToolError(f"there is no door {target} of {here}; doors: {doors}")
    raise ToolError(f"there is no door of {here} to the {target}; doors: {doors}")
