"""Hindsight relabelling for the shop: name the request that a trajectory's writes fulfilled.

The writes that succeeded become the gold writes of a new request for the customer they were
made for, worded exactly as sampled requests are. Address changes are netted (only the last
one per order or customer counts, and none if it restores the original), so a relabelled task
always asks for a change the null policy does not already satisfy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratchet.core.task import TaskSpec
from ratchet.core.tool import ToolError
from ratchet.envs.shop.db import DB_SEEDS, Address, Store, store
from ratchet.envs.shop.tasks import family_of, render
from ratchet.envs.shop.tools import VIOLATION, WRITE_TOOLS, normalise_address, order_key

if TYPE_CHECKING:
    from ratchet.core.trajectory import Trajectory

MAX_DIFFICULTY = 5
_ADDRESS_FIELDS = ("street", "city", "state", "zip_code")


def relabel(trajectory: Trajectory) -> TaskSpec | None:
    """Return the request the trajectory's successful writes fulfilled, or ``None``.

    ``None`` when the trajectory attempted a policy violation (the verifier would fail any
    task it played), made no lasting change, or changed more than one customer's data.
    """
    db_seed = trajectory.task.params.get("db_seed")
    if not isinstance(db_seed, int) or not 0 <= db_seed < DB_SEEDS:
        return None
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
    params = {
        "db_seed": db_seed,
        "customer_id": owners.pop(),
        "identify": "email",
        "writes": writes,
        "facts": [],
    }
    try:
        text = render(params)
    except (ValueError, KeyError):
        return None
    return TaskSpec(text, params, family_of(params), min(len(writes), MAX_DIFFICULTY))


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
