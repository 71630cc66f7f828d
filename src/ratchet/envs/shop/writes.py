"""The shop's write tools: cancelling, re-addressing, changing, returning, exchanging, refunding.

Every write first checks the policy (a confirmed customer, an order in the right status, a
payment method of that customer, a refund to an allowed method) and refuses with a violation
(:meth:`World.refuse`) where the policy forbids it; plain mistakes (an unknown id, an item out
of stock) are ordinary errors. Money moves as ``transactions`` rows, and gift-card balances
follow them.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any

from ratchet.core.tool import ToolError, bind
from ratchet.envs.shop.values import (
    CancelReason,
    CustomerId,
    ItemId,
    OrderId,
    PaymentId,
    State,
    VariantId,
    Zip,
    money,
    normalise_address,
)
from ratchet.envs.shop.world import World


def cancel_order(world: World, order_id: OrderId, reason: CancelReason) -> str:
    """Cancel a pending order and refund its payments to the methods that made them.

    Args:
        world: The shop.
        order_id: The order id.
        reason: Why the customer cancels.
    """
    order = _writable(world, order_id, ("pending",), "cancel")
    paid = world.rows(
        "SELECT payment_method_id AS id, SUM(CASE kind WHEN 'payment' THEN amount_cents "
        "ELSE -amount_cents END) AS net FROM transactions WHERE order_id = ? "
        "GROUP BY payment_method_id ORDER BY payment_method_id",
        order["id"],
    )
    for line in paid:
        method = world.one("SELECT * FROM payment_methods WHERE id = ?", line["id"])
        if method is not None and line["net"] > 0:
            _move_money(world, order, method, "refund", line["net"])
    world.conn.execute(
        "UPDATE variants SET stock = stock + (SELECT COUNT(*) FROM order_items i "
        "WHERE i.order_id = ?1 AND i.variant_id = variants.id) "
        "WHERE id IN (SELECT variant_id FROM order_items WHERE order_id = ?1)",
        (order["id"],),
    )
    world.conn.execute(
        "UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE id = ?",
        (reason, order["id"]),
    )
    world.conn.commit()
    return f"Order {order['id']} cancelled; payments refunded."


def modify_order_address(
    world: World, order_id: OrderId, street: str, city: str, state: State, zip_code: Zip
) -> str:
    """Change the shipping address of a pending order.

    Args:
        world: The shop.
        order_id: The order id.
        street: House number, street and any apartment.
        city: City.
        state: Two-letter state code.
        zip_code: Five-digit zip code.
    """
    order = _writable(world, order_id, ("pending",), "modify the address of")
    address = normalise_address(street, city, state, zip_code)
    if address == (order["street"], order["city"], order["state"], order["zip"]):
        raise ToolError(f"order {order['id']} already ships to that address")
    world.conn.execute(
        "UPDATE orders SET street = ?, city = ?, state = ?, zip = ? WHERE id = ?",
        (*address, order["id"]),
    )
    world.conn.commit()
    return f"Order {order['id']} will ship to {', '.join(address)}."


def modify_customer_address(
    world: World, customer_id: CustomerId, street: str, city: str, state: State, zip_code: Zip
) -> str:
    """Change a customer's default address (existing orders keep theirs).

    Args:
        world: The shop.
        customer_id: The customer's id.
        street: House number, street and any apartment.
        city: City.
        state: Two-letter state code.
        zip_code: Five-digit zip code.
    """
    row = world.one("SELECT * FROM customers WHERE id = ?", customer_id)
    if row is None:
        raise ToolError(f"no customer {customer_id!r}")
    if customer_id not in world.confirmed:
        raise world.refuse(f"modify the address of {customer_id} before confirming identity")
    address = normalise_address(street, city, state, zip_code)
    if address == (row["street"], row["city"], row["state"], row["zip"]):
        raise ToolError(f"{customer_id} already has that default address")
    world.conn.execute(
        "UPDATE customers SET street = ?, city = ?, state = ?, zip = ? WHERE id = ?",
        (*address, customer_id),
    )
    world.conn.commit()
    return f"Default address of {customer_id} is now {', '.join(address)}."


def modify_order_items(
    world: World,
    order_id: OrderId,
    item_ids: list[ItemId],
    new_variant_ids: list[VariantId],
    payment_method_id: PaymentId,
) -> str:
    """Change items of a pending order to other variants of the same products.

    Args:
        world: The shop.
        order_id: The order id.
        item_ids: The items to change (item ids from get_order).
        new_variant_ids: The variant each item becomes, in the same order.
        payment_method_id: Pays a price increase, or receives a price decrease.
    """
    order = _writable(world, order_id, ("pending",), "modify the items of")
    pairs, difference = _swaps(world, order, item_ids, new_variant_ids, "change")
    _settle(world, order, _payment_of(world, payment_method_id, order), difference)
    _apply_swaps(world, pairs, "ordered")
    world.conn.commit()
    return f"Items of {order['id']} changed; price difference {money(difference)}."


def return_items(
    world: World, order_id: OrderId, item_ids: list[ItemId], refund_payment_method_id: PaymentId
) -> str:
    """Return items of a delivered order and refund their price.

    Args:
        world: The shop.
        order_id: The order id.
        item_ids: The items to return (item ids from get_order).
        refund_payment_method_id: The original payment method or the customer's gift card.
    """
    order = _writable(world, order_id, ("delivered",), "return items of")
    items = _order_items(world, order, item_ids)
    method = _payment_of(world, refund_payment_method_id, order)
    _refundable(world, method, order)
    refund = sum(item["price_cents"] for item in items)
    _move_money(world, order, method, "refund", refund)
    for item in items:
        world.conn.execute("UPDATE order_items SET status = 'returned' WHERE id = ?", (item["id"],))
        world.conn.execute(
            "UPDATE variants SET stock = stock + 1 WHERE id = ?", (item["variant_id"],)
        )
    world.conn.commit()
    return f"Returned {len(items)} item(s) of {order['id']}; refunded {money(refund)}."


def exchange_items(
    world: World,
    order_id: OrderId,
    item_ids: list[ItemId],
    new_variant_ids: list[VariantId],
    payment_method_id: PaymentId,
) -> str:
    """Exchange items of a delivered order for other variants of the same products.

    Args:
        world: The shop.
        order_id: The order id.
        item_ids: The items to exchange (item ids from get_order).
        new_variant_ids: The variant each item is exchanged for, in the same order.
        payment_method_id: Pays a price increase, or receives a price decrease.
    """
    order = _writable(world, order_id, ("delivered",), "exchange items of")
    pairs, difference = _swaps(world, order, item_ids, new_variant_ids, "exchange")
    _settle(world, order, _payment_of(world, payment_method_id, order), difference)
    _apply_swaps(world, pairs, "exchanged")
    world.conn.commit()
    return f"Exchanged {len(pairs)} item(s) of {order['id']}; difference {money(difference)}."


def refund_shipping(world: World, order_id: OrderId, refund_payment_method_id: PaymentId) -> str:
    """Refund the shipping fee of a delivered order that arrived late.

    Args:
        world: The shop.
        order_id: The order id.
        refund_payment_method_id: The original payment method or the customer's gift card.
    """
    order = _writable(world, order_id, ("delivered",), "refund shipping of")
    if not order["delivered_late"]:
        raise world.refuse(f"refund shipping of {order['id']}, which was not delivered late")
    if order["shipping_refunded"]:
        raise world.refuse(f"refund shipping of {order['id']} a second time")
    method = _payment_of(world, refund_payment_method_id, order)
    _refundable(world, method, order)
    _move_money(world, order, method, "refund", order["shipping_cents"])
    world.conn.execute("UPDATE orders SET shipping_refunded = 1 WHERE id = ?", (order["id"],))
    world.conn.commit()
    return f"Refunded shipping of {order['id']}: {money(order['shipping_cents'])}."


def write_tools(world: World) -> list[Callable[..., Any]]:
    """Return the write tools bound to ``world``, in the order they are offered."""
    writes = (
        cancel_order,
        modify_order_address,
        modify_customer_address,
        modify_order_items,
        return_items,
        exchange_items,
        refund_shipping,
    )
    return [bind(fn, world) for fn in writes]


def _writable(world: World, order_id: str, statuses: tuple[str, ...], action: str) -> sqlite3.Row:
    order = world.order(order_id)
    if order["customer_id"] not in world.confirmed:
        raise world.refuse(f"{action} {order['id']} before confirming the customer's identity")
    if order["status"] not in statuses:
        allowed = " or ".join(statuses)
        raise world.refuse(f"{action} {order['id']}, which is {order['status']} (not {allowed})")
    return order


def _payment_of(world: World, payment_method_id: str, order: sqlite3.Row) -> sqlite3.Row:
    method = world.one("SELECT * FROM payment_methods WHERE id = ?", payment_method_id)
    if method is None:
        raise ToolError(f"no payment method {payment_method_id!r}")
    if method["customer_id"] != order["customer_id"]:
        raise world.refuse(f"use payment method {method['id']} of another customer")
    return method


def _refundable(world: World, method: sqlite3.Row, order: sqlite3.Row) -> None:
    if method["id"] != order["payment_method_id"] and method["kind"] != "gift_card":
        raise world.refuse(
            f"refund to {method['id']}, which is neither the original payment method of "
            f"{order['id']} nor a gift card"
        )


def _move_money(
    world: World, order: sqlite3.Row, method: sqlite3.Row, kind: str, cents: int
) -> None:
    if method["kind"] == "gift_card":
        sign = 1 if kind == "refund" else -1
        world.conn.execute(
            "UPDATE payment_methods SET balance_cents = balance_cents + ? WHERE id = ?",
            (sign * cents, method["id"]),
        )
    world.conn.execute(
        "INSERT INTO transactions VALUES (?, ?, ?, ?)", (order["id"], method["id"], kind, cents)
    )


def _order_items(world: World, order: sqlite3.Row, item_ids: list[str]) -> list[sqlite3.Row]:
    if not item_ids:
        raise ToolError("item_ids must name at least one item")
    if len(set(item_ids)) != len(item_ids):
        raise ToolError("item_ids must not repeat an item")
    items = []
    for item_id in item_ids:
        item = world.one(
            "SELECT * FROM order_items WHERE id = ? AND order_id = ?", item_id, order["id"]
        )
        if item is None:
            raise ToolError(f"order {order['id']} has no item {item_id!r}")
        if item["status"] != "ordered":
            raise ToolError(f"item {item_id} was already {item['status']}")
        items.append(item)
    return items


def _swaps(
    world: World, order: sqlite3.Row, item_ids: list[str], new_variant_ids: list[str], action: str
) -> tuple[list[tuple[sqlite3.Row, sqlite3.Row]], int]:
    items = _order_items(world, order, item_ids)
    if len(new_variant_ids) != len(items):
        raise ToolError("new_variant_ids must give one variant per item in item_ids")
    pairs = []
    for item, variant_id in zip(items, new_variant_ids, strict=True):
        old = world.one("SELECT * FROM variants WHERE id = ?", item["variant_id"])
        new = world.one("SELECT * FROM variants WHERE id = ?", variant_id)
        if old is None or new is None:
            raise ToolError(f"no variant {variant_id!r}")
        if new["product_id"] != old["product_id"]:
            raise world.refuse(f"{action} item {item['id']} for {variant_id}, a different product")
        if new["id"] == old["id"]:
            raise ToolError(f"item {item['id']} already is variant {variant_id}")
        pairs.append((item, new))
    for variant_id, wanted in Counter(new["id"] for _, new in pairs).items():
        stock = world.one("SELECT stock FROM variants WHERE id = ?", variant_id)
        if stock is None or stock["stock"] < wanted:
            raise ToolError(f"variant {variant_id} is out of stock")
    return pairs, sum(new["price_cents"] - item["price_cents"] for item, new in pairs)


def _settle(world: World, order: sqlite3.Row, method: sqlite3.Row, difference_cents: int) -> None:
    if difference_cents < 0:
        _refundable(world, method, order)
        _move_money(world, order, method, "refund", -difference_cents)
    elif difference_cents > 0:
        if method["kind"] == "gift_card" and method["balance_cents"] < difference_cents:
            raise ToolError(
                f"gift card {method['id']} holds {money(method['balance_cents'])}, less "
                f"than the {money(difference_cents)} to pay"
            )
        _move_money(world, order, method, "payment", difference_cents)


def _apply_swaps(world: World, pairs: list[tuple[sqlite3.Row, sqlite3.Row]], status: str) -> None:
    for item, new in pairs:
        world.conn.execute("UPDATE variants SET stock = stock - 1 WHERE id = ?", (new["id"],))
        world.conn.execute(
            "UPDATE variants SET stock = stock + 1 WHERE id = ?", (item["variant_id"],)
        )
        world.conn.execute(
            "UPDATE order_items SET variant_id = ?, price_cents = ?, status = ? WHERE id = ?",
            (new["id"], new["price_cents"], status, item["id"]),
        )
