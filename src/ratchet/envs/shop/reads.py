"""The shop's read tools: looking a customer up (which confirms identity) and showing records.

Reading is never a violation: an unconfirmed customer's records are refused with a plain error
that says how to confirm the identity first. Each read records what it showed in the world
(:meth:`World.show`): the customer's id, an order (its status and total), a gift card's
balance, a customer's list of orders. Each tool takes the world first; :func:`read_tools`
binds them to one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from ratchet.core.tool import ToolError, bind
from ratchet.envs.choices import closed
from ratchet.envs.shop.db import store
from ratchet.envs.shop.generate import FIRST_NAMES, LAST_NAMES, ZIPS
from ratchet.envs.shop.values import CustomerId, Email, OrderId, money
from ratchet.envs.shop.world import World


def find_customer_by_email(world: World, email: Email) -> str:
    """Look a customer up by email; this confirms their identity.

    Args:
        world: The shop.
        email: The customer's email address.
    """
    found = world.one("SELECT id FROM customers WHERE email = ?", email.strip().lower())
    return _confirm(world, found, "email")


def find_customer_by_name_zip(world: World, first_name: str, last_name: str, zip_code: str) -> str:
    """Look a customer up by name and the zip code of their address; confirms identity.

    Args:
        world: The shop.
        first_name: Given name.
        last_name: Family name.
        zip_code: Zip code of the customer's default address.
    """
    found = world.one(
        "SELECT id FROM customers WHERE lower(first_name) = ? AND lower(last_name) = ? AND zip = ?",
        first_name.strip().lower(),
        last_name.strip().lower(),
        zip_code.strip(),
    )
    return _confirm(world, found, "name and zip code")


def get_customer(world: World, customer_id: CustomerId) -> dict[str, Any]:
    """Show a confirmed customer's profile, address, payment methods and order ids.

    Args:
        world: The shop.
        customer_id: The id returned by a find_customer tool.
    """
    _readable(world, customer_id)
    row = world.one("SELECT * FROM customers WHERE id = ?", customer_id)
    assert row is not None
    methods = world.rows(
        "SELECT * FROM payment_methods WHERE customer_id = ? ORDER BY kind, id", customer_id
    )
    orders = world.rows("SELECT id FROM orders WHERE customer_id = ? ORDER BY id", customer_id)
    for method in methods:
        world.show("balance", method["id"])
    return {
        "customer_id": customer_id,
        "name": f"{row['first_name']} {row['last_name']}",
        "email": row["email"],
        "address": f"{row['street']}, {row['city']}, {row['state']} {row['zip']}",
        "payment_methods": [_method(m) for m in methods],
        "orders": [o["id"] for o in orders],
    }


def list_orders(world: World, customer_id: CustomerId) -> list[dict[str, Any]]:
    """List a confirmed customer's orders with their status and total.

    Args:
        world: The shop.
        customer_id: The customer's id.
    """
    _readable(world, customer_id)
    orders = world.rows("SELECT id FROM orders WHERE customer_id = ? ORDER BY id", customer_id)
    listed = [get_order(world, o["id"]) for o in orders]
    world.show("orders", customer_id)
    return [{k: o[k] for k in ("order_id", "status", "total")} for o in listed]


def get_order(world: World, order_id: OrderId) -> dict[str, Any]:
    """Show an order: status, address, payment, items (with item ids) and total.

    Args:
        world: The shop.
        order_id: The order id, e.g. '#W1234567'.
    """
    order = world.order(order_id)
    _readable(world, order["customer_id"])
    items = world.rows(
        "SELECT i.id, i.variant_id, i.price_cents, i.status, v.options, v.product_id, "
        "p.name FROM order_items i JOIN variants v ON v.id = i.variant_id "
        "JOIN products p ON p.id = v.product_id WHERE i.order_id = ? ORDER BY i.id",
        order["id"],
    )
    total = sum(i["price_cents"] for i in items) + order["shipping_cents"]
    world.show("order", order["id"])
    shown: dict[str, Any] = {
        "order_id": order["id"],
        "customer_id": order["customer_id"],
        "status": order["status"],
        "address": f"{order['street']}, {order['city']}, {order['state']} {order['zip']}",
        "payment_method_id": order["payment_method_id"],
        "items": [
            {
                "item_id": i["id"],
                "product": i["name"],
                "product_id": i["product_id"],
                "variant_id": i["variant_id"],
                "options": i["options"],
                "price": money(i["price_cents"]),
                "status": i["status"],
            }
            for i in items
        ],
        "shipping_fee": money(order["shipping_cents"]),
        "total": money(total),
    }
    if order["status"] == "delivered":
        shown["delivered_late"] = bool(order["delivered_late"])
        shown["shipping_refunded"] = bool(order["shipping_refunded"])
    if order["cancel_reason"]:
        shown["cancel_reason"] = order["cancel_reason"]
    return shown


def list_products(world: World) -> list[dict[str, str]]:
    """List the catalogue: every product's id and name.

    Args:
        world: The shop.
    """
    return [
        {"product_id": p["id"], "name": p["name"]}
        for p in world.rows("SELECT * FROM products ORDER BY name")
    ]


def get_product(world: World, product_id: str) -> dict[str, Any]:
    """Show a product's variants with their options, price and stock.

    Args:
        world: The shop.
        product_id: The product id, e.g. 'P1234'.
    """
    product = world.one("SELECT * FROM products WHERE id = ?", product_id.strip().upper())
    if product is None:
        raise ToolError(f"no product {product_id!r}; list_products shows the catalogue")
    variants = world.rows("SELECT * FROM variants WHERE product_id = ? ORDER BY id", product["id"])
    return {
        "product_id": product["id"],
        "name": product["name"],
        "variants": [
            {
                "variant_id": v["id"],
                "options": v["options"],
                "price": money(v["price_cents"]),
                "stock": v["stock"],
            }
            for v in variants
        ],
    }


def read_tools(world: World) -> list[Callable[..., Any]]:
    """Return the read tools bound to ``world``, in the order they are offered."""
    products = sorted({v.product_id for v in store(world.db_seed).variants.values()})
    return [
        bind(find_customer_by_email, world),
        closed(
            bind(find_customer_by_name_zip, world),
            first_name=FIRST_NAMES,
            last_name=LAST_NAMES,
            zip_code=ZIPS,
        ),
        bind(get_customer, world),
        bind(list_orders, world),
        bind(get_order, world),
        bind(list_products, world),
        closed(bind(get_product, world), product_id=products),
    ]


def _readable(world: World, customer_id: str) -> None:
    if world.one("SELECT id FROM customers WHERE id = ?", customer_id) is None:
        raise ToolError(f"no customer {customer_id!r}")
    if customer_id not in world.confirmed:
        raise ToolError(
            f"identity of {customer_id} is not confirmed; look the customer up with "
            "find_customer_by_email or find_customer_by_name_zip first"
        )


def _confirm(world: World, customer: sqlite3.Row | None, how: str) -> str:
    if customer is None:
        raise ToolError(f"no customer with that {how}")
    world.confirmed.add(customer["id"])
    world.show("customer_id", customer["id"])
    return f"Identity confirmed: customer_id {customer['id']}"


def _method(row: sqlite3.Row) -> dict[str, Any]:
    if row["kind"] == "card":
        return {"payment_method_id": row["id"], "kind": "card", "last4": row["last4"]}
    return {
        "payment_method_id": row["id"],
        "kind": "gift_card",
        "balance": money(row["balance_cents"]),
    }
