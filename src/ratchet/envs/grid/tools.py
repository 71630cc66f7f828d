"""The agent's tools in the grid world: names in, rule functions applied, sentences out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ratchet.envs.grid.world as rules
from ratchet.core.task import Task
from ratchet.core.tool import ToolError
from ratchet.envs.grid.goals import Goal, goal_from_params
from ratchet.envs.grid.world import DIRECTIONS, HELD, Exit, Layout, State

_FILLER = {"the", "a", "an", "door", "to", "room", "towards"}


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
    """Return the tools bound to ``world``: move, look, take, drop, use, craft, inventory."""

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
        name = _name(item)
        index = world.layout.item_index.get(name)
        if index is None:
            room = world.layout.room_name(world.state.room)
            raise ToolError(f"there is no {name} in {room}; use look")
        world.state = rules.take(world.layout, world.state, index)
        return f"You pick up the {name}."

    def drop(item: str) -> str:
        """Put a held item on the floor of the room you are in.

        Args:
            item: The item's name.
        """
        index = _held(world, item)
        world.state = rules.drop(world.layout, world.state, index)
        return f"You drop the {_name(item)} in {world.layout.room_name(world.state.room)}."

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
        return f"You unlock the door {exit.direction} to {where} with the {_name(item)}."

    def craft(item: str) -> str:
        """Make an item from the two held items its recipe needs; they are used up.

        Args:
            item: What to make, e.g. "axe" (see the recipes).
        """
        name = _name(item)
        world.state = rules.craft(world.layout, world.state, name)
        first, second = rules.RECIPES[name]
        return f"You craft {rules.article(name)} from the {first} and the {second}."

    def inventory() -> str:
        """List the items you hold."""
        items = rules.held(world.layout, world.state)
        return f"You hold: {', '.join(items)}." if items else "You hold nothing."

    return [move, look, take, drop, use, craft, inventory]


def _name(text: str) -> str:
    words = text.lower().strip().rstrip(".").split()
    if words and words[0] in ("the", "a", "an"):
        words = words[1:]
    return " ".join(words)


def _held(world: World, item: str) -> int:
    index = world.layout.item_index.get(_name(item))
    if index is None or world.state.places[index] != HELD:
        raise ToolError(f"you do not hold the {_name(item)}; check your inventory")
    return index


def _exit(world: World, target: str) -> Exit:
    wanted = " ".join(w for w in target.lower().strip().rstrip(".").split() if w not in _FILLER)
    layout, state = world.layout, world.state
    for exit in layout.exits[state.room]:
        if wanted in (exit.direction, layout.rooms[exit.room]):
            return exit
    doors = "; ".join(
        f"{e.direction} to {layout.room_name(e.room)}" for e in layout.exits[state.room]
    )
    here = layout.room_name(state.room)
    if wanted in DIRECTIONS:
        raise ToolError(f"there is no door {wanted} of {here}; doors: {doors}")
    raise ToolError(f"{target!r} is not a door of {here}; doors: {doors}")
