"""Hindsight relabelling for the shop: name the request that a trajectory fulfilled.

The writes that succeeded become the gold writes of a new request for the customer they were
made for, worded exactly as sampled requests are, the customer identifying themselves the way
the trajectory looked them up (by email, or by name and zip code). Address changes are netted
(only the last one per order or customer counts, and none if it restores the original), so a
relabelled task always asks for a change the null policy does not already satisfy.

A trajectory that changed nothing but looked something up for a confirmed customer and stated
it in its final answer is named by the question that answer answers: the status and/or total
of the order it read, the balance of the gift card it saw, which orders are pending, or (for
a lookup alone) the customer's id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratchet.core.env import FINISH
from ratchet.core.task import TaskSpec
from ratchet.core.tool import ToolError
from ratchet.envs.shop.db import DB_SEEDS, store
from ratchet.envs.shop.oracle import difficulty_of
from ratchet.envs.shop.schema import Address, Store
from ratchet.envs.shop.tasks import MAX_DIFFICULTY, family_of
from ratchet.envs.shop.tools import WRITE_TOOLS
from ratchet.envs.shop.values import normalise_address, order_key
from ratchet.envs.shop.verify import expected, unstated
from ratchet.envs.shop.wording import Fact, Identify, render
from ratchet.envs.shop.world import VIOLATION

if TYPE_CHECKING:
    from ratchet.core.trajectory import Trajectory

_ADDRESS_FIELDS = ("street", "city", "state", "zip_code")


def relabel(trajectory: Trajectory) -> TaskSpec | None:
    """Return the request the trajectory's successful writes fulfilled, or ``None``.

    ``None`` when the trajectory attempted a policy violation (the verifier would fail any
    task it played), made no lasting change, or changed more than one customer's data.
    """
    db_seed = trajectory.task.params.get("db_seed")
    if not isinstance(db_seed, int) or not 0 <= db_seed < DB_SEEDS:
        return None
    if not any(s.call and s.call.name in WRITE_TOOLS and not s.failed for s in trajectory.steps):
        return _question(db_seed, trajectory)
    writes: list[dict[str, Any]] = []
    for step in trajectory.steps:
        error = step.observation.error
        if error is not None and error.startswith(VIOLATION):
            return None
        if step.call is not None and error is None and step.call.name in WRITE_TOOLS:
            writes.append({"name": step.call.name, "arguments": dict(step.call.arguments)})
    shop = store(db_seed)
    try:
        writes = _net_addresses(shop, [_normalised(w) for w in writes])
    except (ToolError, KeyError):
        return None
    owners = {_owner(shop, w) for w in writes}
    if len(owners) != 1:
        return None
    owner = owners.pop()
    params = {"db_seed": db_seed, "customer_id": owner, "writes": writes, "facts": []}
    return _spec(params, _identified(trajectory, owner))


def _identified(trajectory: Trajectory, customer: str) -> Identify:
    """How the trajectory confirmed ``customer``: by email, or by name and zip code."""
    for step in trajectory.steps:
        call = step.call
        confirmed = not step.failed and step.observation.text.endswith(f" {customer}")
        if call is not None and call.name.startswith("find_customer") and confirmed:
            return "name_zip" if call.name == "find_customer_by_name_zip" else "email"
    return "email"


def _spec(params: dict[str, Any], identify: Identify) -> TaskSpec | None:
    try:
        text = render(params, identify)
    except (ValueError, KeyError):
        return None
    level = min(difficulty_of(params), MAX_DIFFICULTY)
    return TaskSpec(text, params, family_of(params), level)


def _question(db_seed: int, trajectory: Trajectory) -> TaskSpec | None:
    """The question the final answer answers, about the last thing looked up that it states.

    A lookup shows the customer's id, so an episode that only found the customer and said so
    answered "What is my customer id?".
    """
    confirmed, answer = None, None
    shop = store(db_seed)
    reads: list[tuple[str, list[Fact]]] = []
    for step in trajectory.steps:
        call = step.call
        if call is None or step.failed:
            continue
        if call.name.startswith("find_customer"):
            confirmed = step.observation.text.rpartition(" ")[2]
            if confirmed in shop.customers:
                reads.append((confirmed, [{"kind": "customer_id", "customer_id": confirmed}]))
        elif call.name == FINISH:
            answer = str(call.arguments.get("answer", ""))
        elif confirmed is not None:
            reads.append((confirmed, _facts_shown(shop, confirmed, call.name, call.arguments)))
    if not answer:
        return None
    for customer, facts in reversed(reads):
        params = {"db_seed": db_seed, "customer_id": customer, "writes": [], "facts": facts}
        values = expected(params).facts if facts else ()
        own = set(shop.customers[customer].order_ids)
        stated = [f for f, v in zip(facts, values, strict=True) if not unstated(answer, (v,), own)]
        if stated:
            return _spec({**params, "facts": stated}, _identified(trajectory, customer))
    return None


def _facts_shown(shop: Store, customer: str, tool: str, args: dict[str, Any]) -> list[Fact]:
    """The facts about ``customer`` that a successful read showed."""
    if tool == "get_order":
        order = shop.orders.get(order_key(str(args.get("order_id", ""))))
        if order is None or order.customer_id != customer:
            return []
        return [{"kind": "status", "order_id": order.id}, {"kind": "total", "order_id": order.id}]
    if tool == "get_customer" and args.get("customer_id") == customer:
        methods = shop.customers[customer].payment_ids
        gift = [p for p in methods if shop.payments[p].kind == "gift_card"]
        return [{"kind": "balance", "payment_method_id": gift[0]}] if gift else []
    if tool == "list_orders" and args.get("customer_id") == customer:
        return [{"kind": "pending_orders", "customer_id": customer}]
    return []


def _normalised(write: dict[str, Any]) -> dict[str, Any]:
    """Spell arguments the way the tools stored them (ids and addresses are normalised)."""
    args = dict(write["arguments"])
    if "order_id" in args:
        args["order_id"] = order_key(str(args["order_id"]))
    if "street" in args:
        fields = normalise_address(*(str(args[name]) for name in _ADDRESS_FIELDS))
        args.update(zip(_ADDRESS_FIELDS, fields, strict=True))
    return {"name": write["name"], "arguments": args}


def _target(write: dict[str, Any]) -> str | None:
    args = write["arguments"]
    if write["name"] == "modify_order_address":
        return str(args["order_id"])
    if write["name"] == "modify_customer_address":
        return str(args["customer_id"])
    return None


def _net_addresses(shop: Store, writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    seen: set[str] = set()
    for write in reversed(writes):
        target = _target(write)
        if target is None:
            kept.append(write)
            continue
        if target in seen:
            continue
        seen.add(target)
        args = write["arguments"]
        new = Address(*(args[name] for name in _ADDRESS_FIELDS))
        if target in shop.orders:
            original = shop.orders[target].address
        else:
            original = shop.customers[target].address
        if new != original:
            kept.append(write)
    return kept[::-1]


def _owner(shop: Store, write: dict[str, Any]) -> str:
    args = write["arguments"]
    if write["name"] == "modify_customer_address":
        return str(args["customer_id"])
    return shop.orders[args["order_id"]].customer_id
