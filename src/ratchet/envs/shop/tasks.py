"""Shop tasks: customer requests drawn from a seeded store.

A task's params name the store (``db_seed``), the customer, the gold ``writes`` (tool calls) and
the ``facts`` they ask for; how the customer identifies themselves (email, or name and zip) is
wording, drawn for the instruction only. Sub-requests are writes and at most one question; some
depend on an earlier one (ship an order to the new default address; the gift card balance
after refunds).

**Difficulty is the number of tool calls the shortest plan makes, the identity lookup
included** (:func:`~ratchet.envs.shop.oracle.difficulty_of`): telling the customer their
customer id is 1 (the lookup shows it), reading an order to answer its status or cancelling a
named order is 2, a return that needs the order's item ids is 3, an exchange that also needs
the product's variants is 4 or more.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ratchet.core.task import TaskSpec
from ratchet.envs.shop.db import DB_SEEDS, store
from ratchet.envs.shop.generate import random_address
from ratchet.envs.shop.oracle import difficulty_of
from ratchet.envs.shop.schema import CANCEL_REASONS, Address, Customer, Order, Store
from ratchet.envs.shop.wording import Identify, render

Write = dict[str, Any]
Fact = dict[str, str]

MAX_DIFFICULTY = 6
_MAX_DRAWS = 2000
_ASK_LAST = 0.35
IDENTITY = "identity"
FAMILIES = {
    "cancel_order": "cancel",
    "modify_order_address": "address",
    "modify_customer_address": "address",
    "modify_order_items": "modify_items",
    "return_items": "return",
    "exchange_items": "exchange",
    "refund_shipping": "refund",
}


@dataclass
class _Plan:
    """What a request has used up so far, so its writes stay feasible together."""

    store: Store
    customer: Customer
    writes: list[Write] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    used_orders: set[str] = field(default_factory=set)
    taken_stock: Counter[str] = field(default_factory=Counter)
    gift_card: str | None = None
    gift_start: int = 0
    gift_cents: int = 0

    def __post_init__(self) -> None:
        for payment_id in self.customer.payment_ids:
            method = self.store.payments[payment_id]
            if method.kind == "gift_card":
                self.gift_card, self.gift_start = method.id, method.balance_cents or 0
                self.gift_cents = self.gift_start

    def orders(self, status: str) -> list[Order]:
        return [
            self.store.orders[o]
            for o in self.customer.order_ids
            if self.store.orders[o].status == status and o not in self.used_orders
        ]


def sample(rng: random.Random, difficulty: int) -> TaskSpec:
    """Draw one request whose shortest plan makes ``difficulty`` tool calls, lookup included.

    Difficulty 1 asks for the customer's id, which the identity lookup itself shows: the
    rung a model climbs first (find the customer, say what the lookup said).

    Raises:
        ValueError: If ``difficulty`` is outside ``1..MAX_DIFFICULTY``.
        RuntimeError: If no such request is found (does not happen with the built-in data).
    """
    if not 1 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"shop difficulty must be in 1..{MAX_DIFFICULTY}; got {difficulty}")
    for _ in range(_MAX_DRAWS):
        shop = store(rng.randrange(DB_SEEDS))
        customer = shop.customers[rng.choice(sorted(shop.customers))]
        plan = _Plan(shop, customer)
        if difficulty == 1:
            plan.facts.append({"kind": "customer_id", "customer_id": customer.id})
        elif not _fill(rng, plan, rng.randint(1, difficulty - 1)):
            continue
        params = {
            "db_seed": shop.seed,
            "customer_id": customer.id,
            "writes": plan.writes,
            "facts": plan.facts,
        }
        identify: Identify = rng.choice(("email", "name_zip"))
        if difficulty_of(params) == difficulty:
            return TaskSpec(render(params, identify), params, family_of(params))
    raise RuntimeError(f"shop: no feasible request of difficulty {difficulty}")


def family_of(params: dict[str, Any]) -> str:
    """Name a request's family: its one kind of write, ``info``, ``identity`` or ``mixed``."""
    kinds = {FAMILIES[w["name"]] for w in params["writes"]}
    if not kinds:
        asked = {fact["kind"] for fact in params["facts"]}
        return IDENTITY if asked == {"customer_id"} else "info"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _fill(rng: random.Random, plan: _Plan, count: int) -> bool:
    """Add ``count`` sub-requests (writes, and at most one question) to ``plan``."""
    left = count
    # An atom that found nothing to do for this customer is dropped, so a customer without
    # (say) pending orders fails fast instead of redrawing the same impossible atoms.
    atoms = list(_ATOMS)
    while left > 0 and atoms:
        if left == 1 and rng.random() < _ASK_LAST and _ask(rng, plan):
            return True
        usable = atoms if left >= 2 else [a for a in atoms if a != "address_chain"]
        if not usable:
            return False
        atom = rng.choice(usable)
        added = _ATOMS[atom](rng, plan)
        if added == 0:
            atoms.remove(atom)
        left -= added
    return left == 0


def _ask(rng: random.Random, plan: _Plan) -> int:
    """Add one question: an order's status and/or total, the gift card balance, or pending ids.

    The order is one the request does not change; the balance is asked after the writes.
    """
    if plan.facts:
        return 0
    kinds = ["balance"] if plan.gift_card else []
    untouched = [o for o in plan.customer.order_ids if o not in plan.used_orders]
    kinds += ["order"] * 2 if untouched else []
    kinds += ["pending"] if plan.orders("pending") else []
    if not kinds:
        return 0
    kind = rng.choice(kinds)
    if kind == "order":
        order = rng.choice(untouched)
        plan.used_orders.add(order)
        asked = rng.choice((("status",), ("total",), ("status", "total")))
        plan.facts += [{"kind": k, "order_id": order} for k in asked]
    elif kind == "balance" and plan.gift_card:
        plan.facts.append({"kind": "balance", "payment_method_id": plan.gift_card})
    else:
        plan.facts.append({"kind": "pending_orders", "customer_id": plan.customer.id})
    return 1


def _write(plan: _Plan, name: str, **arguments: Any) -> int:
    plan.writes.append({"name": name, "arguments": arguments})
    return 1


def _address_args(address: Address) -> dict[str, str]:
    return {
        "street": address.street,
        "city": address.city,
        "state": address.state,
        "zip_code": address.zip,
    }


def _cancel(rng: random.Random, plan: _Plan) -> int:
    pending = plan.orders("pending")
    if not pending:
        return 0
    order = rng.choice(pending)
    plan.used_orders.add(order.id)
    if order.payment_id == plan.gift_card:
        plan.gift_cents += order.total_cents
    return _write(plan, "cancel_order", order_id=order.id, reason=rng.choice(CANCEL_REASONS))


def _order_address(rng: random.Random, plan: _Plan, address: Address | None = None) -> int:
    pending = plan.orders("pending")
    if not pending:
        return 0
    order = rng.choice(pending)
    address = address or random_address(rng)
    if address == order.address:
        return 0
    plan.used_orders.add(order.id)
    return _write(plan, "modify_order_address", order_id=order.id, **_address_args(address))


def _customer_address(rng: random.Random, plan: _Plan) -> int:
    if any(w["name"] == "modify_customer_address" for w in plan.writes):
        return 0
    address = random_address(rng)
    if address == plan.customer.address:
        return 0
    return _write(
        plan, "modify_customer_address", customer_id=plan.customer.id, **_address_args(address)
    )


def _address_chain(rng: random.Random, plan: _Plan) -> int:
    """New default address, then a pending order shipped there too (depends on the first)."""
    if not plan.orders("pending") or not _customer_address(rng, plan):
        return 0
    new = plan.writes[-1]["arguments"]
    address = Address(new["street"], new["city"], new["state"], new["zip_code"])
    if _order_address(rng, plan, address):
        return 2
    plan.writes.pop()
    return 0


def _swap(rng: random.Random, plan: _Plan, status: str, tool: str) -> int:
    candidates = plan.orders(status)
    if not candidates:
        return 0
    order = rng.choice(candidates)
    present = {item.variant_id for item in order.items}
    swaps: list[tuple[str, str]] = []
    for item in rng.sample(order.items, min(len(order.items), rng.randint(1, 2))):
        options = [
            v.id
            for v in plan.store.siblings[item.variant_id]
            if v.id not in present and v.stock > plan.taken_stock[v.id]
        ]
        if options:
            new = rng.choice(options)
            present.add(new)
            plan.taken_stock[new] += 1
            swaps.append((item.id, new))
    if not swaps:
        return 0
    plan.used_orders.add(order.id)
    old = {item.id: item.price_cents for item in order.items}
    difference = sum(plan.store.variants[new].price_cents - old[i] for i, new in swaps)
    method = _settling_method(rng, plan, order, difference)
    return _write(
        plan,
        tool,
        order_id=order.id,
        item_ids=[i for i, _ in swaps],
        new_variant_ids=[new for _, new in swaps],
        payment_method_id=method,
    )


def _settling_method(rng: random.Random, plan: _Plan, order: Order, difference: int) -> str:
    gift = plan.gift_card
    if difference < 0:
        method = rng.choice(sorted({order.payment_id, gift or order.payment_id}))
    else:
        usable = [p for p in plan.customer.payment_ids if p != gift]
        if gift and plan.gift_cents >= difference:
            usable.append(gift)
        method = rng.choice(usable)
    if method == gift:
        plan.gift_cents -= difference
    return method


def _modify_items(rng: random.Random, plan: _Plan) -> int:
    return _swap(rng, plan, "pending", "modify_order_items")


def _exchange(rng: random.Random, plan: _Plan) -> int:
    return _swap(rng, plan, "delivered", "exchange_items")


def _refund_target(rng: random.Random, plan: _Plan, order: Order, cents: int) -> str:
    method = rng.choice(sorted({order.payment_id, plan.gift_card or order.payment_id}))
    if method == plan.gift_card:
        plan.gift_cents += cents
    return method


def _return(rng: random.Random, plan: _Plan) -> int:
    delivered = plan.orders("delivered")
    if not delivered:
        return 0
    order = rng.choice(delivered)
    items = rng.sample(order.items, rng.randint(1, len(order.items)))
    plan.used_orders.add(order.id)
    method = _refund_target(rng, plan, order, sum(i.price_cents for i in items))
    return _write(
        plan,
        "return_items",
        order_id=order.id,
        item_ids=[i.id for i in items],
        refund_payment_method_id=method,
    )


def _refund_shipping(rng: random.Random, plan: _Plan) -> int:
    late = [o for o in plan.orders("delivered") if o.delivered_late]
    if not late:
        return 0
    order = rng.choice(late)
    plan.used_orders.add(order.id)
    method = _refund_target(rng, plan, order, order.shipping_cents)
    return _write(plan, "refund_shipping", order_id=order.id, refund_payment_method_id=method)


_ATOMS: dict[str, Callable[[random.Random, _Plan], int]] = {
    "cancel": _cancel,
    "order_address": _order_address,
    "customer_address": _customer_address,
    "address_chain": _address_chain,
    "modify_items": _modify_items,
    "exchange": _exchange,
    "return": _return,
    "refund_shipping": _refund_shipping,
    "ask": _ask,
}
