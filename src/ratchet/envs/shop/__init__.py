"""``shop``: a retail customer-service world backed by SQLite, with a written policy.

Each task is a customer's request against one of 64 seeded stores (customers, addresses,
products with variants and stock, orders, cards and gift cards). The agent confirms the
customer's identity, then reads and changes the store with 14 tools. The verifier replays the
gold calls on a fresh copy and compares the two databases by a canonical hash, checks that the
final answer states every fact asked for, and fails any episode that attempted a policy
violation. See ``docs/envs/shop.md``.
"""

from __future__ import annotations

from ratchet.core.env import SimpleEnv
from ratchet.core.task import Task
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.envs.shop.db import store
from ratchet.envs.shop.oracle import oracle_calls
from ratchet.envs.shop.relabel import relabel
from ratchet.envs.shop.tasks import MAX_DIFFICULTY, sample
from ratchet.envs.shop.tools import POLICY, make_tools
from ratchet.envs.shop.verify import judge
from ratchet.envs.shop.world import World


def _build(task: Task) -> World:
    if not isinstance(task.params.get("db_seed"), int):
        raise ValueError(f"shop task {task.id} has no integer 'db_seed' param")
    return World.open(task.params["db_seed"])


def _check(task: Task, world: World, answer: str | None) -> Verdict:
    return judge(task.params, world, answer)


def _solve(task: Task) -> list[ToolCall]:
    # The customer gave either their email or their name and zip; the oracle uses what it got.
    email = store(task.params["db_seed"]).customers[task.params["customer_id"]].email
    return oracle_calls(task.params, by_email=email in task.instruction)


env: SimpleEnv[World] = SimpleEnv(
    name="shop",
    description="Customer service in a SQLite shop: identity, orders, returns, refunds, policy.",
    sample=sample,
    build=_build,
    tools=make_tools,
    verify=_check,
    oracle=_solve,
    policy=POLICY,
    max_difficulty=MAX_DIFFICULTY,
    version="4",
    teardown=World.close,
    describe=relabel,
)

__all__ = ["POLICY", "World", "env"]
