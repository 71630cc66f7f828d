"""An env from an MCP server (``servers/stockroom_mcp.py``) plus tasks and a verifier.

The agent gets the server's ``stock``, ``add`` and ``remove`` tools (``reset`` stays hidden:
setup uses it); the verifier reads the stock room's final state through the same connection.
Server processes are reused across episodes (``reuse=True``): ``setup`` resets the room.

    ratchet check examples/mcp_env.py:env -n 10
    ratchet eval examples/mcp_env.py:env --model local -n 4
"""

import json
import random
import sys
from pathlib import Path

from ratchet import Task, TaskSpec, ToolCall, Verdict
from ratchet.integrations.mcp import MCPClient, StdioServer, mcp_env

ITEMS = ["apples", "pears", "plums", "figs"]
SERVER = StdioServer(sys.executable, [str(Path(__file__).parent / "servers" / "stockroom_mcp.py")])


def listing(counts: dict[str, int]) -> str:
    return ", ".join(f"{item} {count}" for item, count in counts.items())


def sample(rng: random.Random, difficulty: int) -> TaskSpec:
    """Start with three items; change `difficulty` of them to new counts."""
    start = {item: rng.randrange(10) for item in rng.sample(ITEMS, 3)}
    changed = rng.sample(sorted(start), difficulty)
    goal = {item: rng.choice([n for n in range(10) if n != start[item]]) for item in changed}
    text = (
        f"The stock room holds {listing(start)}. Change it so that it holds {listing(goal)}, "
        "leaving the rest as it is, then call finish."
    )
    return TaskSpec(text, {"start": start, "goal": goal})


def setup(task: Task, client: MCPClient) -> None:
    client.call("reset", {"items": task.params["start"]})


def wanted(task: Task) -> dict[str, int]:
    return {**task.params["start"], **task.params["goal"]}


def verify(task: Task, client: MCPClient, answer: str | None) -> Verdict:
    """Pass only if the stock room's final state is the goal (zero counts and absent are alike)."""
    final = {k: v for k, v in json.loads(client.call("stock")).items() if v}
    goal = {k: v for k, v in wanted(task).items() if v}
    return Verdict.of(final == goal, f"stock is {listing(final)}; wanted {listing(goal)}")


def oracle(task: Task) -> list[ToolCall]:
    calls = []
    for item, count in task.params["goal"].items():
        change = count - task.params["start"][item]
        tool = "add" if change > 0 else "remove"
        calls.append(ToolCall(tool, {"item": item, "amount": abs(change)}))
    return [*calls, ToolCall("finish", {"answer": "done"})]


env = mcp_env(
    SERVER,
    name="example/mcp-stockroom",
    description="Restock a stock room through an MCP server's tools.",
    sample=sample,
    verify=verify,
    oracle=oracle,
    setup=setup,
    hidden={"reset"},
    reuse=True,
    max_difficulty=3,
)
