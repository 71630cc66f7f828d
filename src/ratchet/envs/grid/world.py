"""The grid world's rules: rooms joined by doors, items on floors, and the actions on them.

A world is a :class:`Layout` (what never changes: rooms, doors, locks, which items exist) and a
:class:`State` (what actions change: where the agent stands, where each item is, which doors
are unlocked). One pure function per action maps a state to the next or raises
:class:`~ratchet.core.tool.ToolError`; the agent's tools and the planner both go through them,
so the oracle's plan obeys exactly the rules the agent does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ratchet.core.tool import ToolError

HELD = -1
"""Place code of an item in the agent's inventory."""
ABSENT = -2
"""Place code of an item that does not exist: not crafted yet, or used up by crafting."""

COLORS = ("red", "blue", "green", "yellow", "purple", "orange", "white", "grey")
METALS = ("brass", "iron", "silver", "copper", "gold")
DIRECTIONS: dict[str, tuple[int, int]] = {
    "north": (0, -1),
    "south": (0, 1),
    "east": (1, 0),
    "west": (-1, 0),
}
RECIPES: dict[str, tuple[str, str]] = {
    "axe": ("wood", "stone"),
    "bow": ("wood", "string"),
    "torch": ("wood", "cloth"),
    "brick": ("clay", "straw"),
    "arrow": ("feather", "flint"),
    "candle": ("wax", "string"),
    "rope": ("reed", "string"),
    "quiver": ("arrow", "cloth"),
    "lantern": ("candle", "glass"),
    "oven": ("brick", "stone"),
    "raft": ("rope", "wood"),
}
MATERIALS = tuple(
    sorted({part for parts in RECIPES.values() for part in parts if part not in RECIPES})
)
TRINKETS = ("cup", "book", "lamp", "boot", "coin", "map", "bell", "vase")
KEYS = tuple(f"{metal} key" for metal in METALS)
VOCABULARY = (*KEYS, *MATERIALS, *RECIPES, *TRINKETS)
"""Every item a house can hold: keys, materials, products and trinkets."""


def key_metal(item: str) -> str | None:
    """Return the metal of a key's name (``"brass key"`` -> ``"brass"``), else ``None``."""
    metal, _, kind = item.partition(" ")
    return metal if kind == "key" and metal in METALS else None


def ingredients(product: str) -> list[str]:
    """Return every item a product is made from, recursively, the product first."""
    found = [product]
    for part in RECIPES.get(product, ()):
        found += [p for p in ingredients(part) if p not in found]
    return found


def article(item: str) -> str:
    """Return ``item`` with its indefinite article (``"an axe"``, ``"a bow"``)."""
    return f"{'an' if item[0] in 'aeiou' else 'a'} {item}"


class Exit(NamedTuple):
    """A door seen from one side.

    Attributes:
        direction: Compass direction from this room.
        room: Index of the room on the other side.
        door: Index of the door.
    """

    direction: str
    room: int
    door: int


class State(NamedTuple):
    """What actions change; a tuple so the planner can hash it.

    Attributes:
        room: Index of the room the agent is in.
        places: Per item (layout order): a room index, :data:`HELD` or :data:`ABSENT`.
        unlocked: Bit ``i`` set when door ``i``'s lock has been opened.
    """

    room: int
    places: tuple[int, ...]
    unlocked: int


@dataclass(frozen=True)
class Layout:
    """What never changes in one world.

    Attributes:
        rooms: Room colours; a room is named ``"<colour> room"``.
        exits: Per room, the doors leading out of it.
        doors: Per door, the two rooms it joins.
        locks: Per door, the metal of its lock, or ``None`` when it is not locked.
        items: Every item that exists or can be crafted in this world.
        item_index: Item name to its index in ``items``.
    """

    rooms: tuple[str, ...]
    exits: tuple[tuple[Exit, ...], ...]
    doors: tuple[tuple[int, int], ...]
    locks: tuple[str | None, ...]
    items: tuple[str, ...]
    item_index: Mapping[str, int]

    def room_name(self, room: int) -> str:
        """Return ``"the <colour> room"`` for a room index."""
        return f"the {self.rooms[room]} room"


def parse(params: Mapping[str, Any]) -> tuple[Layout, State]:
    """Build a world's layout and starting state from a task's params.

    The params hold ``rooms`` (``[colour, x, y]`` rows), ``doors`` (``[colour, colour, metal or
    null]`` rows), ``items`` (``[item, colour]`` rows) and ``start`` (a colour).

    Raises:
        ValueError: Naming what is malformed.
    """
    try:
        cells = {str(name): (int(x), int(y)) for name, x, y in params["rooms"]}
        rooms = tuple(cells)
        index = {name: i for i, name in enumerate(rooms)}
        doors = tuple((index[a], index[b]) for a, b, _ in params["doors"])
        locks = tuple(None if lock is None else str(lock) for _, _, lock in params["doors"])
        placed = [(str(item), index[room]) for item, room in params["items"]]
        start = index[params["start"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"grid params are malformed: {type(exc).__name__}: {exc}") from None
    names = [item for item, _ in placed]
    if len(rooms) != len(params["rooms"]) or len(set(names)) != len(names):
        raise ValueError("grid params are malformed: room and item names must be unique")
    exits: list[list[Exit]] = [[] for _ in rooms]
    for door, (a, b) in enumerate(doors):
        (ax, ay), (bx, by) = cells[rooms[a]], cells[rooms[b]]
        step = (bx - ax, by - ay)
        direction = next((d for d, v in DIRECTIONS.items() if v == step), None)
        if direction is None:
            raise ValueError(f"grid params: rooms {rooms[a]} and {rooms[b]} are not neighbours")
        back = next(d for d, v in DIRECTIONS.items() if v == (-step[0], -step[1]))
        exits[a].append(Exit(direction, b, door))
        exits[b].append(Exit(back, a, door))
    craftable = [
        p for p in RECIPES if all(i in names for i in ingredients(p)[1:] if i not in RECIPES)
    ]
    items = (*names, *(p for p in craftable if p not in names))
    layout = Layout(
        rooms=rooms,
        exits=tuple(
            tuple(sorted(e, key=lambda x: list(DIRECTIONS).index(x.direction))) for e in exits
        ),
        doors=doors,
        locks=locks,
        items=items,
        item_index={item: i for i, item in enumerate(items)},
    )
    places = tuple(room for _, room in placed) + (ABSENT,) * (len(items) - len(placed))
    return layout, State(start, places, 0)


def is_open(layout: Layout, state: State, door: int) -> bool:
    """Whether a door can be walked through: it has no lock, or its lock was opened."""
    return layout.locks[door] is None or bool(state.unlocked >> door & 1)


def go(layout: Layout, state: State, exit: Exit) -> State:
    """Walk through a door of the current room.

    Raises:
        ToolError: If the door is locked.
    """
    if not is_open(layout, state, exit.door):
        raise ToolError(
            f"the door {exit.direction} to {layout.room_name(exit.room)} is locked "
            f"(a {layout.locks[exit.door]} lock); use the matching key on it first"
        )
    return State(exit.room, state.places, state.unlocked)


def take(layout: Layout, state: State, item: int) -> State:
    """Pick up an item lying in the current room.

    Raises:
        ToolError: If the item is held already or is not in this room.
    """
    name = layout.items[item]
    if state.places[item] == HELD:
        raise ToolError(f"you already hold the {name}")
    if state.places[item] != state.room:
        raise ToolError(f"there is no {name} in {layout.room_name(state.room)}; use look")
    return _move_item(state, item, HELD)


def drop(layout: Layout, state: State, item: int) -> State:
    """Put a held item on the floor of the current room.

    Raises:
        ToolError: If the item is not held.
    """
    if state.places[item] != HELD:
        raise ToolError(f"you do not hold the {layout.items[item]}; check your inventory")
    return _move_item(state, item, state.room)


def unlock(layout: Layout, state: State, key: int, exit: Exit) -> State:
    """Open a door's lock with a held key of the same metal.

    Raises:
        ToolError: If the item is not a held key, the door is not locked, or the metals differ.
    """
    name = layout.items[key]
    if state.places[key] != HELD:
        raise ToolError(f"you do not hold the {name}; check your inventory")
    lock = layout.locks[exit.door]
    where = f"the door {exit.direction} to {layout.room_name(exit.room)}"
    if is_open(layout, state, exit.door):
        raise ToolError(f"{where} is not locked")
    metal = key_metal(name)
    if metal is None:
        raise ToolError(f"the {name} is not a key; only keys open doors")
    if metal != lock:
        raise ToolError(f"the {name} does not fit {where}: it has a {lock} lock")
    return State(state.room, state.places, state.unlocked | 1 << exit.door)


def craft(layout: Layout, state: State, product: str) -> State:
    """Make a product from the two held items its recipe names, using them up.

    Raises:
        ToolError: If there is no such recipe or an ingredient is not held.
    """
    recipe = RECIPES.get(product)
    if recipe is None:
        raise ToolError(f"there is no recipe for {product!r}; recipes: {recipe_book()}")
    missing = [part for part in recipe if not _holds(layout, state, part)]
    if missing:
        needs = " and the ".join(recipe)
        raise ToolError(
            f"{article(product)} needs the {needs}; you are missing the {' and the '.join(missing)}"
        )
    places = list(state.places)
    for part in recipe:
        places[layout.item_index[part]] = ABSENT
    places[layout.item_index[product]] = HELD
    return State(state.room, tuple(places), state.unlocked)


def recipe_book() -> str:
    """Return every recipe as one line: ``axe = wood + stone; ...``."""
    return "; ".join(f"{product} = {a} + {b}" for product, (a, b) in RECIPES.items())


def look(layout: Layout, state: State) -> str:
    """Describe the current room only: its items and its doors."""
    here = sorted(layout.items[i] for i, place in enumerate(state.places) if place == state.room)
    seen = f"You see: {', '.join(here)}." if here else "The floor is empty."
    doors = []
    for exit in layout.exits[state.room]:
        lock = layout.locks[exit.door]
        status = "" if is_open(layout, state, exit.door) else f" (locked: {lock} lock)"
        doors.append(f"{exit.direction} to {layout.room_name(exit.room)}{status}")
    return f"You are in {layout.room_name(state.room)}. {seen} Doors: {'; '.join(doors)}."


def held(layout: Layout, state: State) -> list[str]:
    """Return the names of the held items, sorted."""
    return sorted(layout.items[i] for i, place in enumerate(state.places) if place == HELD)


def _holds(layout: Layout, state: State, item: str) -> bool:
    index = layout.item_index.get(item)
    return index is not None and state.places[index] == HELD


def _move_item(state: State, item: int, place: int) -> State:
    places = list(state.places)
    places[item] = place
    return State(state.room, tuple(places), state.unlocked)
