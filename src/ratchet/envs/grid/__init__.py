"""``grid``: a partially observable text world of rooms, locked doors, keys and crafting.

The agent sees only the room it stands in. It moves through doors (some locked, opened by
using the key of the lock's metal), takes and drops items, and crafts products from held
ingredients. Goals: fetch an item, craft a product, bring an item to a room, go to a room,
unlock a door. Difficulty ``d`` means the shortest plan, found by breadth-first search over
world states, takes exactly ``d`` actions; the oracle plays that plan. The verifier
reads the final world state (inventory, item locations, locks, the agent's room) and ignores
the answer passed to ``finish``.
"""

from __future__ import annotations

from ratchet.core.env import FINISH, SimpleEnv
from ratchet.core.task import Task, TaskSpec
from ratchet.core.tool import ToolCall, ToolError, tools_from
from ratchet.core.trajectory import Trajectory
from ratchet.core.verdict import Verdict
from ratchet.envs.grid.generate import MAX_DIFFICULTY, difficulty_of, sample
from ratchet.envs.grid.goals import Goal, goal_to_params, instruction, judge
from ratchet.envs.grid.plan import shortest_plan
from ratchet.envs.grid.tools import World, build, tools
from ratchet.envs.grid.world import HELD, RECIPES, recipe_book

NAME = "grid"
POLICY = (
    "You see only the room you are in: look describes it, and move shows each room you enter. "
    "A locked door opens when you use a key of the lock's metal on it. Craft from items you "
    "hold; the ingredients are used up. Recipes: "
    f"{recipe_book()}. Only the final state of the world counts, not what you say."
)


def _check(task: Task, world: World, answer: str | None) -> Verdict:
    """Judge the world's final state; the answer is ignored so claims cannot pass."""
    passed, found = judge(world.layout, world.state, world.goal)
    return Verdict.of(passed, f"goal {'reached' if passed else 'not reached'}: {found}")


def _solve(task: Task) -> list[ToolCall]:
    world = build(task)
    plan = shortest_plan(world.layout, world.start, world.goal)
    if plan is None:
        raise ValueError(f"grid task {task.id} has no solution")
    return [*plan, ToolCall(FINISH, {"answer": "done"})]


def _relabel(trajectory: Trajectory) -> TaskSpec | None:
    """Name what the trajectory left behind as a goal in the same world.

    Preference: a crafted item held, an item left in a new room, a door unlocked, an item
    held, a new room reached. The difficulty is that of the goal's shortest plan.
    """
    task = trajectory.task
    if task.env != NAME:
        return None
    try:
        world = build(task)
    except ValueError:
        return None
    done = _replay(world, [step.call for step in trajectory.steps if step.call is not None])
    for goal in _achievements(world):
        plan = shortest_plan(world.layout, world.start, goal, max_steps=done)
        if plan:
            params = {**task.params, "goal": goal_to_params(world.layout, goal)}
            text = instruction(world.layout, world.start, goal)
            return TaskSpec(text, params, goal.kind, difficulty_of(len(plan)))
    return None


def _replay(world: World, calls: list[ToolCall]) -> int:
    """Apply the calls up to ``finish`` to ``world``; return how many succeeded."""
    by_name = {tool.name: tool for tool in tools_from(*tools(world))}
    succeeded = 0
    for call in calls:
        if call.name == FINISH:
            break
        tool = by_name.get(call.name)
        if tool is None:
            continue
        try:
            tool(call.arguments)
        except ToolError:
            continue
        succeeded += 1
    return succeeded


def _achievements(world: World) -> list[Goal]:
    layout, start, end = world.layout, world.start, world.state
    changed = [i for i, place in enumerate(end.places) if place != start.places[i]]
    holding = [i for i in changed if end.places[i] == HELD]
    crafted = [Goal("craft", item=i) for i in holding if layout.items[i] in RECIPES]
    moved = [Goal("bring", item=i, room=end.places[i]) for i in changed if end.places[i] >= 0]
    unlocked = [Goal("unlock", door=d) for d in range(len(layout.doors)) if end.unlocked >> d & 1]
    fetched = [Goal("fetch", item=i) for i in holding if layout.items[i] not in RECIPES]
    reached = [Goal("go", room=end.room)] if end.room != start.room else []
    return [*crafted, *moved, *unlocked, *fetched, *reached]


env: SimpleEnv[World] = SimpleEnv(
    name=NAME,
    description="Partially observable rooms with locked doors, keys and crafting recipes.",
    sample=sample,
    build=build,
    tools=tools,
    verify=_check,
    oracle=_solve,
    policy=POLICY,
    max_difficulty=MAX_DIFFICULTY,
    version="3",
    describe=_relabel,
)

__all__ = ["POLICY", "env"]
