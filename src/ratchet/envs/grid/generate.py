"""Drawing grid tasks: a random house, a goal, and a shortest plan that fits the difficulty.

Difficulty ``d`` means the shortest plan (without ``finish``) takes exactly ``d`` actions, so
each level is one action harder than the one below. The sampler draws a house and a goal sized
for the level, plans with breadth-first search, and draws again until the plan has that length.
"""

from __future__ import annotations

import random
from typing import Any

from ratchet.core.task import TaskSpec
from ratchet.envs.grid.goals import GoalKind, goal_from_params, instruction
from ratchet.envs.grid.plan import shortest_plan
from ratchet.envs.grid.world import (
    COLORS,
    DIRECTIONS,
    KEYS,
    MATERIALS,
    METALS,
    RECIPES,
    TRINKETS,
    ingredients,
    parse,
)

MAX_DIFFICULTY = 10
_GRID_SIDE = 3
# House sizes, lock counts and goal kinds per *size class*: level ``d`` draws houses of class
# ``(d + 1) // 2``, the class that held plans of ``d`` actions when a level spanned two lengths.
_ROOMS = {1: (2, 3), 2: (2, 4), 3: (3, 5), 4: (4, 6), 5: (5, 7)}
_LOCKS = {1: (0, 0, 1), 2: (0, 1), 3: (0, 1, 1), 4: (1, 1, 2), 5: (1, 2, 2)}
_KINDS: dict[int, tuple[GoalKind, ...]] = {
    1: ("fetch", "go", "unlock"),
    2: ("fetch", "go", "unlock", "bring", "craft"),
    3: ("fetch", "go", "unlock", "bring", "craft"),
    4: ("fetch", "go", "unlock", "bring", "bring", "craft", "craft", "craft"),
    5: ("go", "unlock", "bring", "bring", "craft", "craft", "craft"),
}
_SIMPLE = tuple(p for p, parts in RECIPES.items() if not any(i in RECIPES for i in parts))
_NESTED = tuple(p for p in RECIPES if p not in _SIMPLE)
_MAX_DRAWS = 2000


def difficulty_of(plan_length: int) -> int:
    """Return the level of a plan of ``plan_length`` actions (1 at least, capped at the top)."""
    return max(1, min(MAX_DIFFICULTY, plan_length))


def sample(rng: random.Random, difficulty: int) -> TaskSpec:
    """Draw one task whose shortest plan fits ``difficulty`` (a pure function of its inputs).

    Raises:
        ValueError: If ``difficulty`` is outside ``1..MAX_DIFFICULTY``.
    """
    if not 1 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"grid difficulty must be in 1..{MAX_DIFFICULTY}; got {difficulty}")
    size = (difficulty + 1) // 2
    for _ in range(_MAX_DRAWS):
        params = _draw(rng, size)
        goal = _goal(rng, params, size)
        if goal is None:
            continue
        params["goal"] = goal
        layout, start = parse(params)
        target = goal_from_params(layout, params)
        plan = shortest_plan(layout, start, target, max_steps=difficulty)
        if plan is not None and len(plan) == difficulty:
            return TaskSpec(instruction(layout, start, target), params, target.kind)
    raise RuntimeError(f"grid: no task of difficulty {difficulty} after {_MAX_DRAWS} draws")


def _draw(rng: random.Random, size: int) -> dict[str, Any]:
    cells = _cells(rng, rng.randint(*_ROOMS[size]))
    names = rng.sample(COLORS, len(cells))
    at = dict(zip(cells, names, strict=True))
    doors = _doors(rng, cells)
    locked = rng.sample(range(len(doors)), min(len(doors), rng.choice(_LOCKS[size])))
    metals = rng.sample(METALS, len(locked) + 1)
    door_rows: list[list[Any]] = [
        [at[a], at[b], metals[locked.index(i)] if i in locked else None]
        for i, (a, b) in enumerate(doors)
    ]
    start = rng.choice(names)
    # Each key lies where the doors opened so far let the agent reach, so every world is
    # solvable and a later key may sit behind an earlier lock.
    items: list[list[Any]] = []
    passable = [row for row in door_rows if row[2] is None]
    for door in locked:
        reachable = [n for n in names if n in _hops(start, passable)]
        items.append([f"{door_rows[door][2]} key", rng.choice(reachable)])
        passable.append(door_rows[door])
    if rng.random() < 0.2:
        items.append([f"{metals[-1]} key", rng.choice(names)])
    return {
        "rooms": [[at[c], c[0], c[1]] for c in cells],
        "doors": door_rows,
        "items": items,
        "start": start,
    }


def _hops(start: str, doors: list[list[Any]]) -> dict[str, int]:
    """Return how many doors separate each reachable room from ``start``."""
    hops = {start: 0}
    frontier = [start]
    while frontier:
        following = []
        for room in frontier:
            for a, b, _ in doors:
                for here, there in ((a, b), (b, a)):
                    if here == room and there not in hops:
                        hops[there] = hops[room] + 1
                        following.append(there)
        frontier = following
    return hops


def _cells(rng: random.Random, count: int) -> list[tuple[int, int]]:
    cells = [(rng.randrange(_GRID_SIDE), rng.randrange(_GRID_SIDE))]
    while len(cells) < count:
        x, y = rng.choice(cells)
        dx, dy = rng.choice(list(DIRECTIONS.values()))
        cell = (x + dx, y + dy)
        if 0 <= cell[0] < _GRID_SIDE and 0 <= cell[1] < _GRID_SIDE and cell not in cells:
            cells.append(cell)
    return cells


def _doors(
    rng: random.Random, cells: list[tuple[int, int]]
) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Join the rooms: a random spanning tree plus a few extra doors between neighbours."""
    pairs = [
        (a, b)
        for i, a in enumerate(cells)
        for b in cells[i + 1 :]
        if abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1
    ]
    rng.shuffle(pairs)
    group = {cell: cell for cell in cells}

    def root(cell: tuple[int, int]) -> tuple[int, int]:
        while group[cell] != cell:
            cell = group[cell]
        return cell

    doors = []
    for a, b in pairs:
        if root(a) != root(b):
            group[root(a)] = root(b)
            doors.append((a, b))
        elif rng.random() < 0.25:
            doors.append((a, b))
    return doors


def _goal(rng: random.Random, params: dict[str, Any], size: int) -> dict[str, Any] | None:
    """Pick a goal and place the items it needs (and a few unrelated ones) in ``params``.

    From size class 3 up, the rooms a goal points to are drawn from those farthest from the
    start, which makes plans that fit the level far more likely.
    """
    kind = rng.choice(_KINDS[size])
    rooms = [row[0] for row in params["rooms"]]
    hops = _hops(params["start"], params["doors"])
    far = [r for r in rooms if size < 3 or hops[r] >= max(hops.values()) - 1]
    items: list[list[Any]] = params["items"]
    taken = {row[0] for row in items}
    locked = [door for door in params["doors"] if door[2] is not None]
    goal: dict[str, Any]
    if kind == "unlock":
        if not locked:
            return None
        door = rng.choice(locked)
        goal = {"kind": kind, "rooms": door[:2]}
    elif kind == "go":
        goal = {"kind": kind, "room": rng.choice(far)}
    elif kind == "craft":
        simple = size <= 2 or (size in (3, 4) and rng.random() < 0.5)
        product = rng.choice(_SIMPLE if simple else _NESTED)
        for part in ingredients(product)[1:]:
            if part not in RECIPES:
                items.append([part, rng.choice(rooms)])
        goal = {"kind": kind, "item": product}
    else:
        keys = [row[0] for row in items if row[0] in KEYS]
        if keys and rng.random() < 0.3:
            item = rng.choice(keys)
        else:
            item = rng.choice([i for i in (*TRINKETS, *MATERIALS) if i not in taken])
            items.append([item, rng.choice(far)])
        goal = {"kind": kind, "item": item}
        if kind == "bring":
            goal["room"] = rng.choice(rooms)
    taken = {row[0] for row in items}
    spare = [i for i in (*TRINKETS, *MATERIALS) if i not in taken]
    for item in rng.sample(spare, rng.randint(0, 3)):
        items.append([item, rng.choice(rooms)])
    return goal
