"""Shop tasks: customer requests drawn from a seeded store, and their wording.

A task's params name the store (``db_seed``), the customer, how they identify themselves, the
gold ``writes`` (tool calls) and the ``facts`` they ask for. The instruction is rendered from
those params alone, so hindsight relabelling (which turns the writes a trajectory made into
params) and the sampler share one wording.

Difficulty is the number of sub-requests: each is one write, or one question; some depend on
an earlier one (ship an order to the new default address; the gift card balance after refunds).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ratchet.core.task import TaskSpec
from ratchet.envs.shop.db import (
    CANCEL_REASONS,
    DB_SEEDS,
    Address,
    Customer,
    Order,
    Store,
    random_address,
    store,
)

Write = dict[str, Any]
Fact = dict[str, str]

_REASON_TEXT = {
    "no longer needed": "I no longer need it",
    "ordered by mistake": "I ordered it by mistake",
}
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
    """Draw one customer request of ``difficulty`` sub-requests from a seeded store.

    Raises:
        RuntimeError: If no feasible request is found (does not happen with the built-in data).
    """
    for _ in range(100):
        shop = store(rng.randrange(DB_SEEDS))
        customer = shop.customers[rng.choice(sorted(shop.customers))]
        plan = _Plan(shop, customer)
        if _fill(rng, plan, difficulty):
            params = {
                "db_seed": shop.seed,
                "customer_id": customer.id,
                "identify": rng.choice(["email", "name_zip"]),
                "writes": plan.writes,
                "facts": plan.facts,
            }
            return TaskSpec(render(params), params, family_of(params))
    raise RuntimeError(f"shop: no feasible request of difficulty {difficulty}")


def family_of(params: dict[str, Any]) -> str:
    """Name a request's family: its one kind of write, ``info``, or ``mixed``."""
    kinds = {FAMILIES[w["name"]] for w in params["writes"]}
    if not kinds:
        return "info"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _fill(rng: random.Random, plan: _Plan, difficulty: int) -> bool:
    if difficulty == 1 and rng.random() < 1 / 8:
        return _info(rng, plan)
    left = difficulty
    # An atom that found nothing to do for this customer is dropped, so a customer without
    # (say) pending orders fails fast instead of redrawing the same impossible atoms.
    atoms = list(_ATOMS)
    while left > 0 and atoms:
        gift = plan.gift_card
        changed_gift = plan.gift_cents != plan.gift_start
        if left == 1 and gift and changed_gift and not plan.facts and rng.random() < 0.5:
            plan.facts.append({"kind": "balance", "payment_method_id": gift})
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


def _info(rng: random.Random, plan: _Plan) -> bool:
    kinds = ["order"]
    if plan.gift_card:
        kinds.append("balance")
    if plan.orders("pending"):
        kinds.append("pending")
    kind = rng.choice(kinds)
    if kind == "order":
        order = rng.choice(sorted(plan.customer.order_ids))
        plan.facts += [
            {"kind": "status", "order_id": order},
            {"kind": "total", "order_id": order},
        ]
    elif kind == "balance" and plan.gift_card:
        plan.facts.append({"kind": "balance", "payment_method_id": plan.gift_card})
    else:
        plan.facts.append({"kind": "pending_orders", "customer_id": plan.customer.id})
    return True


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


def _ask_order(rng: random.Random, plan: _Plan) -> int:
    """A question about an order the request does not change: its status and total."""
    if plan.facts:
        return 0
    untouched = [o for o in plan.customer.order_ids if o not in plan.used_orders]
    if not untouched:
        return 0
    order = rng.choice(untouched)
    plan.used_orders.add(order)
    plan.facts += [{"kind": "status", "order_id": order}, {"kind": "total", "order_id": order}]
    return 1


_ATOMS: dict[str, Callable[[random.Random, _Plan], int]] = {
    "cancel": _cancel,
    "order_address": _order_address,
    "customer_address": _customer_address,
    "address_chain": _address_chain,
    "modify_items": _modify_items,
    "exchange": _exchange,
    "return": _return,
    "refund_shipping": _refund_shipping,
    "ask_order": _ask_order,
}


class Unspeakable(ValueError):
    """The writes cannot be worded unambiguously (e.g. two identical items in one order)."""


def render(params: dict[str, Any]) -> str:
    """Word a request from its params, as the customer would write it.

    Raises:
        Unspeakable: If an item could not be named unambiguously by product and options.
    """
    shop = store(params["db_seed"])
    customer = shop.customers[params["customer_id"]]
    name = f"{customer.first_name} {customer.last_name}"
    if params["identify"] == "email":
        lines = [f"Hi, this is {name} ({customer.email})."]
    else:
        lines = [f"Hi, this is {name}, zip code {customer.address.zip}."]
    touched = {w["arguments"].get("order_id") for w in params["writes"]}
    variants = {i.id: i.variant_id for o in touched if o for i in shop.orders[o].items}
    new_default: dict[str, str] | None = None
    for write in params["writes"]:
        args = write["arguments"]
        lines.append(_sentence(shop, write["name"], args, variants, new_default))
        if write["name"] == "modify_customer_address":
            new_default = args
        if write["name"] in ("modify_order_items", "exchange_items"):
            variants.update(zip(args["item_ids"], args["new_variant_ids"], strict=True))
    lines += _questions(params["facts"], bool(params["writes"]))
    return " ".join(lines)


def _sentence(
    shop: Store,
    tool: str,
    args: dict[str, Any],
    variants: dict[str, str],
    new_default: dict[str, str] | None,
) -> str:
    order = shop.orders.get(args.get("order_id", ""))
    if tool == "modify_customer_address":
        return f"Please change my default address to {_where(args)}."
    assert order is not None
    if tool == "cancel_order":
        return f"Please cancel order {order.id}: {_REASON_TEXT[args['reason']]}."
    if tool == "modify_order_address":
        if new_default is not None and _where(new_default) == _where(args):
            return f"Please ship my pending order {order.id} to that new address as well."
        return f"Please ship my pending order {order.id} to {_where(args)} instead."
    if tool == "refund_shipping":
        where = _pay_phrase(shop, order, args["refund_payment_method_id"])
        return f"Order {order.id} arrived late; please refund its shipping fee to {where}."
    names = [_item_name(shop, order, variants, item) for item in args["item_ids"]]
    if tool == "return_items":
        where = _pay_phrase(shop, order, args["refund_payment_method_id"])
        return f"I want to return {_join(names)} from order {order.id}, refunded to {where}."
    changes = [
        f"{item} for the one with {shop.variants[new].options}"
        for item, new in zip(names, args["new_variant_ids"], strict=True)
    ]
    method = _pay_phrase(shop, order, args["payment_method_id"])
    if tool == "modify_order_items":
        return (
            f"In my pending order {order.id}, please swap {_join(changes)}; settle any price "
            f"difference with {method}."
        )
    return (
        f"Please exchange {_join(changes)} from my delivered order {order.id}; settle any price "
        f"difference with {method}."
    )


def _where(args: dict[str, str]) -> str:
    return f"{args['street']}, {args['city']}, {args['state']} {args['zip_code']}"


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _item_name(shop: Store, order: Order, variants: dict[str, str], item_id: str) -> str:
    variant = shop.variants[variants[item_id]]
    same = [i for i in order.items if variants[i.id] == variant.id]
    if len(same) != 1:
        raise Unspeakable(f"order {order.id} holds {len(same)} items of variant {variant.id}")
    return f"the {variant.product} ({variant.options})"


def _pay_phrase(shop: Store, order: Order, payment_id: str) -> str:
    if payment_id == order.payment_id:
        return "the original payment method"
    method = shop.payments[payment_id]
    if method.kind == "gift_card":
        return "my gift card"
    return f"my card ending in {method.last4}"


def _questions(facts: list[Fact], after_writes: bool) -> list[str]:
    asked = []
    for fact in facts:
        if fact["kind"] == "status":
            asked.append(f"What is the status of my order {fact['order_id']}")
        elif fact["kind"] == "total":
            asked.append("what is its total")
        elif fact["kind"] == "balance":
            later = " after all that" if after_writes else ""
            asked.append(f"What balance is left on my gift card{later}")
        else:
            asked.append("Which of my orders are still pending (their order ids)")
    return [" and ".join(asked) + "?"] if asked else []
