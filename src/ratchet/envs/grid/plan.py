"""The shortest plan to a goal: breadth-first search over world states.

The search tries only actions that can matter for the goal, which keeps it small without
making any plan longer: there is no carrying limit, so taking an unrelated item, dropping an
item anywhere but the goal room, or crafting an unrelated product never shortens a plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import ratchet.envs.grid.world as world
from ratchet.core.tool import ToolCall
from ratchet.envs.grid.goals import Goal, achieved
from ratchet.envs.grid.world import HELD, RECIPES, Layout, State

Move = tuple[State, ToolCall]


def shortest_plan(
    layout: Layout, start: State, goal: Goal, max_steps: int | None = None
) -> list[ToolCall] | None:
    """Return a shortest list of actions from ``start`` to a state where ``goal`` holds.

    Args:
        layout: The world.
        start: The state to plan from.
        goal: What must hold at the end.
        max_steps: Give up on plans longer than this (``None``: search the whole space).

    Returns:
        The actions (without ``finish``), or ``None`` when no plan within ``max_steps`` exists.
    """
    if achieved(goal, start):
        return []
    search = _search(layout, goal)
    parent: dict[State, tuple[State, ToolCall] | None] = {start: None}
    frontier = [start]
    depth = 0
    while frontier and (max_steps is None or depth < max_steps):
        depth += 1
        following: list[State] = []
        for state in frontier:
            for after, call in _moves(layout, state, search):
                if after in parent:
                    continue
                parent[after] = (state, call)
                if achieved(goal, after):
                    return _unwind(parent, after)
                following.append(after)
        frontier = following
    return None


@dataclass(frozen=True)
class _Search:
    """What one search needs at hand, worked out once rather than per state."""

    keys: dict[str, int]
    takeable: tuple[int, ...]
    recipes: tuple[tuple[str, tuple[int, ...]], ...]
    drop: int
    drop_room: int


def _search(layout: Layout, goal: Goal) -> _Search:
    locks = {lock for lock in layout.locks if lock is not None}
    keys: dict[str, int] = {}
    for index, name in enumerate(layout.items):
        metal = world.key_metal(name)
        if metal is not None and metal in locks:
            keys[metal] = index
    parts = world.ingredients(layout.items[goal.item]) if goal.item >= 0 else []
    wanted = sorted(
        {*keys.values(), *(layout.item_index[p] for p in parts if p in layout.item_index)}
    )
    recipes = tuple(
        (layout.items[i], tuple(layout.item_index[p] for p in RECIPES[layout.items[i]]))
        for i in wanted
        if layout.items[i] in RECIPES
    )
    bring = goal.kind == "bring"
    return _Search(
        keys,
        tuple(wanted),
        recipes,
        goal.item if bring else -1,
        goal.room if bring else -1,
    )


def _moves(layout: Layout, state: State, search: _Search) -> Iterator[Move]:
    places = state.places
    for exit in layout.exits[state.room]:
        if world.is_open(layout, state, exit.door):
            yield world.go(layout, state, exit), ToolCall("move", {"to": _room(layout, exit)})
            continue
        key = search.keys.get(layout.locks[exit.door] or "", -1)
        if key >= 0 and places[key] == HELD:
            call = ToolCall("use", {"item": layout.items[key], "target": _room(layout, exit)})
            yield world.unlock(layout, state, key, exit), call
    for item in search.takeable:
        if places[item] == state.room:
            yield world.take(layout, state, item), ToolCall("take", {"item": layout.items[item]})
    for name, parts in search.recipes:
        if all(places[p] == HELD for p in parts):
            yield world.craft(layout, state, name), ToolCall("craft", {"item": name})
    if state.room == search.drop_room and places[search.drop] == HELD:
        drop = ToolCall("drop", {"item": layout.items[search.drop]})
        yield world.drop(layout, state, search.drop), drop


def _room(layout: Layout, exit: world.Exit) -> str:
    return f"{layout.rooms[exit.room]} room"


def _unwind(parent: dict[State, tuple[State, ToolCall] | None], state: State) -> list[ToolCall]:
    calls: list[ToolCall] = []
    link = parent[state]
    while link is not None:
        state, call = link
        calls.append(call)
        link = parent[state]
    return calls[::-1]
