"""The shop's tools and the written policy they enforce.

A :class:`World` is one session's private database plus what the policy needs to remember:
which customers have confirmed their identity, and every violation attempted. Tools refuse an
action the policy forbids with a ``ToolError`` that starts with ``"Policy violation:"`` and
record it, so the verifier can fail the episode even if the agent later recovers.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from ratchet.core.tool import ToolCall, ToolError
from ratchet.envs.choices import closed
from ratchet.envs.shop.db import FIRST_NAMES, LAST_NAMES, ZIPS, fresh_copy, money, store

POLICY = """\
You are a customer-service agent for an online shop. Follow these rules:
1. Confirm the customer's identity before reading or changing their account or orders: look
   them up by email (find_customer_by_email) or by first name, last name and zip code
   (find_customer_by_name_zip). Act only for the customer whose identity was confirmed.
2. Only pending orders can be cancelled, re-addressed or have their items modified.
   Cancelling refunds every payment on the order to the method that made it.
3. Only delivered orders can have items returned or exchanged; each item at most once.
4. Items can only be changed or exchanged for another variant of the same product that is in
   stock. A price difference is charged to, or refunded to, the payment method the customer
   names; a gift card must hold enough balance to pay.
5. Refunds go to the order's original payment method or to the customer's gift card.
6. A delivered order that arrived late may have its shipping fee refunded, once.
7. Attempting an action these rules forbid is a violation and fails the request.
8. When the customer asks for information, state it in your final answer (finish): each
   asked value once, with no alternatives and no other amounts or orders."""

WRITE_TOOLS = (
    "cancel_order",
    "modify_order_address",
    "modify_customer_address",
    "modify_order_items",
    "return_items",
    "exchange_items",
    "refund_shipping",
)
VIOLATION = "Policy violation: "
CancelReason = Literal["no longer needed", "ordered by mistake"]
# Ids and codes have one shape each; constraining arguments to it keeps a model that decodes
# under the tools' schemas from inventing ids of another shape (it copies the real ones).
OrderId = Annotated[str, Field(pattern=r"^#?[Ww]\d{7}$")]
CustomerId = Annotated[str, Field(pattern=r"^[a-z]+_[a-z]+_\d{4}$")]
ItemId = Annotated[str, Field(pattern=r"^I\d{6}$")]
VariantId = Annotated[str, Field(pattern=r"^V\d{5}$")]
PaymentId = Annotated[str, Field(pattern=r"^(card|gift_card)_\d{7}$")]
Email = Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[A-Za-z]+$")]
State = Annotated[str, Field(pattern=r"^[A-Za-z]{2}$")]
Zip = Annotated[str, Field(pattern=r"^\d{5}$")]


@dataclass
class World:
    """One session's shop: a private database copy and the policy's memory.

    Attributes:
        db_seed: Which base store this copies.
        conn: The session's own in-memory database.
        confirmed: Customers whose identity has been confirmed.
        violations: Every policy violation attempted, in order.
    """

    db_seed: int
    conn: sqlite3.Connection
    confirmed: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, db_seed: int) -> World:
        """Start a world on a fresh copy of the base store for ``db_seed``."""
        return cls(db_seed, fresh_copy(db_seed))

    def close(self) -> None:
        """Release the database."""
        self.conn.close()

    def refuse(self, rule: str) -> ToolError:
        """Record a policy violation and return the error that reports it to the agent."""
        self.violations.append(rule)
        return ToolError(VIOLATION + rule)

    def one(self, sql: str, *args: object) -> sqlite3.Row | None:
        """Return the first row of a query, or ``None``."""
        cursor = self.conn.execute(sql, args)
        cursor.row_factory = sqlite3.Row
        row: sqlite3.Row | None = cursor.fetchone()
        return row

    def rows(self, sql: str, *args: object) -> list[sqlite3.Row]:
        """Return all rows of a query."""
        cursor = self.conn.execute(sql, args)
        cursor.row_factory = sqlite3.Row
        return list(cursor.fetchall())


def order_key(order_id: str) -> str:
    """Normalise an order id: ``"w1234567"`` and ``"#W1234567"`` both give ``"#W1234567"``."""
    text = order_id.strip().lstrip("#").upper()
    return f"#{text}"


def _title(text: str) -> str:
    return " ".join(word[:1].upper() + word[1:] for word in text.split())


def normalise_address(
    street: str, city: str, state: str, zip_code: str
) -> tuple[str, str, str, str]:
    """Return an address in the spelling the shop stores.

    Raises:
        ToolError: If a field is empty or malformed.
    """
    street, city, state, zip_code = _title(street), _title(city), state.strip().upper(), zip_code
    zip_code = zip_code.strip()
    if not street or not city:
        raise ToolError("street and city must not be empty")
    if len(state) != 2 or not state.isalpha():
        raise ToolError(f"state must be a two-letter code like 'TX'; got {state!r}")
    if len(zip_code) != 5 or not zip_code.isdigit():
        raise ToolError(f"zip_code must be five digits; got {zip_code!r}")
    return street, city, state, zip_code


def make_tools(world: World) -> list[Callable[..., Any]]:
    """Return the shop's tools bound to ``world``, in the order they are offered."""
    conn = world.conn

    def find_order(order_id: str) -> sqlite3.Row:
        order = world.one("SELECT * FROM orders WHERE id = ?", order_key(order_id))
        if order is None:
            raise ToolError(f"no order {order_id!r}; order ids look like '#W1234567'")
        return order

    def readable(customer_id: str) -> None:
        if world.one("SELECT id FROM customers WHERE id = ?", customer_id) is None:
            raise ToolError(f"no customer {customer_id!r}")
        if customer_id not in world.confirmed:
            raise ToolError(
                f"identity of {customer_id} is not confirmed; look the customer up with "
                "find_customer_by_email or find_customer_by_name_zip first"
            )

    def writable(order_id: str, statuses: tuple[str, ...], action: str) -> sqlite3.Row:
        order = find_order(order_id)
        if order["customer_id"] not in world.confirmed:
            raise world.refuse(f"{action} {order['id']} before confirming the customer's identity")
        if order["status"] not in statuses:
            allowed = " or ".join(statuses)
            raise world.refuse(
                f"{action} {order['id']}, which is {order['status']} (not {allowed})"
            )
        return order

    def payment_of(payment_method_id: str, order: sqlite3.Row) -> sqlite3.Row:
        method = world.one("SELECT * FROM payment_methods WHERE id = ?", payment_method_id)
        if method is None:
            raise ToolError(f"no payment method {payment_method_id!r}")
        if method["customer_id"] != order["customer_id"]:
            raise world.refuse(f"use payment method {method['id']} of another customer")
        return method

    def refundable(method: sqlite3.Row, order: sqlite3.Row) -> None:
        if method["id"] != order["payment_method_id"] and method["kind"] != "gift_card":
            raise world.refuse(
                f"refund to {method['id']}, which is neither the original payment method of "
                f"{order['id']} nor a gift card"
            )

    def move_money(order: sqlite3.Row, method: sqlite3.Row, kind: str, cents: int) -> None:
        if method["kind"] == "gift_card":
            sign = 1 if kind == "refund" else -1
            conn.execute(
                "UPDATE payment_methods SET balance_cents = balance_cents + ? WHERE id = ?",
                (sign * cents, method["id"]),
            )
        conn.execute(
            "INSERT INTO transactions VALUES (?, ?, ?, ?)", (order["id"], method["id"], kind, cents)
        )

    def order_items(order: sqlite3.Row, item_ids: list[str]) -> list[sqlite3.Row]:
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

    def swaps(
        order: sqlite3.Row, item_ids: list[str], new_variant_ids: list[str], action: str
    ) -> tuple[list[tuple[sqlite3.Row, sqlite3.Row]], int]:
        items = order_items(order, item_ids)
        if len(new_variant_ids) != len(items):
            raise ToolError("new_variant_ids must give one variant per item in item_ids")
        pairs = []
        for item, variant_id in zip(items, new_variant_ids, strict=True):
            old = world.one("SELECT * FROM variants WHERE id = ?", item["variant_id"])
            new = world.one("SELECT * FROM variants WHERE id = ?", variant_id)
            if old is None or new is None:
                raise ToolError(f"no variant {variant_id!r}")
            if new["product_id"] != old["product_id"]:
                raise world.refuse(
                    f"{action} item {item['id']} for {variant_id}, a different product"
                )
            if new["id"] == old["id"]:
                raise ToolError(f"item {item['id']} already is variant {variant_id}")
            pairs.append((item, new))
        for variant_id, wanted in Counter(new["id"] for _, new in pairs).items():
            stock = world.one("SELECT stock FROM variants WHERE id = ?", variant_id)
            if stock is None or stock["stock"] < wanted:
                raise ToolError(f"variant {variant_id} is out of stock")
        return pairs, sum(new["price_cents"] - item["price_cents"] for item, new in pairs)

    def settle(order: sqlite3.Row, method: sqlite3.Row, difference_cents: int) -> None:
        if difference_cents < 0:
            refundable(method, order)
            move_money(order, method, "refund", -difference_cents)
        elif difference_cents > 0:
            if method["kind"] == "gift_card" and method["balance_cents"] < difference_cents:
                raise ToolError(
                    f"gift card {method['id']} holds {money(method['balance_cents'])}, less "
                    f"than the {money(difference_cents)} to pay"
                )
            move_money(order, method, "payment", difference_cents)

    def apply_swaps(pairs: list[tuple[sqlite3.Row, sqlite3.Row]], status: str) -> None:
        for item, new in pairs:
            conn.execute("UPDATE variants SET stock = stock - 1 WHERE id = ?", (new["id"],))
            conn.execute(
                "UPDATE variants SET stock = stock + 1 WHERE id = ?", (item["variant_id"],)
            )
            conn.execute(
                "UPDATE order_items SET variant_id = ?, price_cents = ?, status = ? WHERE id = ?",
                (new["id"], new["price_cents"], status, item["id"]),
            )

    def confirm(customer: sqlite3.Row | None, how: str) -> str:
        if customer is None:
            raise ToolError(f"no customer with that {how}")
        world.confirmed.add(customer["id"])
        return f"Identity confirmed: customer_id {customer['id']}"

    def find_customer_by_email(email: Email) -> str:
        """Look a customer up by email; this confirms their identity.

        Args:
            email: The customer's email address.
        """
        found = world.one("SELECT id FROM customers WHERE email = ?", email.strip().lower())
        return confirm(found, "email")

    def find_customer_by_name_zip(first_name: str, last_name: str, zip_code: str) -> str:
        """Look a customer up by name and the zip code of their address; confirms identity.

        Args:
            first_name: Given name.
            last_name: Family name.
            zip_code: Zip code of the customer's default address.
        """
        found = world.one(
            "SELECT id FROM customers WHERE lower(first_name) = ? AND lower(last_name) = ? "
            "AND zip = ?",
            first_name.strip().lower(),
            last_name.strip().lower(),
            zip_code.strip(),
        )
        return confirm(found, "name and zip code")

    def get_customer(customer_id: CustomerId) -> dict[str, Any]:
        """Show a confirmed customer's profile, address, payment methods and order ids.

        Args:
            customer_id: The id returned by a find_customer tool.
        """
        readable(customer_id)
        row = world.one("SELECT * FROM customers WHERE id = ?", customer_id)
        assert row is not None
        methods = world.rows(
            "SELECT * FROM payment_methods WHERE customer_id = ? ORDER BY kind, id", customer_id
        )
        orders = world.rows("SELECT id FROM orders WHERE customer_id = ? ORDER BY id", customer_id)
        return {
            "customer_id": customer_id,
            "name": f"{row['first_name']} {row['last_name']}",
            "email": row["email"],
            "address": f"{row['street']}, {row['city']}, {row['state']} {row['zip']}",
            "payment_methods": [_method(m) for m in methods],
            "orders": [o["id"] for o in orders],
        }

    def list_orders(customer_id: CustomerId) -> list[dict[str, Any]]:
        """List a confirmed customer's orders with their status and total.

        Args:
            customer_id: The customer's id.
        """
        readable(customer_id)
        orders = world.rows("SELECT id FROM orders WHERE customer_id = ? ORDER BY id", customer_id)
        listed = [get_order(o["id"]) for o in orders]
        return [{k: o[k] for k in ("order_id", "status", "total")} for o in listed]

    def get_order(order_id: OrderId) -> dict[str, Any]:
        """Show an order: status, address, payment, items (with item ids) and total.

        Args:
            order_id: The order id, e.g. '#W1234567'.
        """
        order = find_order(order_id)
        readable(order["customer_id"])
        items = world.rows(
            "SELECT i.id, i.variant_id, i.price_cents, i.status, v.options, v.product_id, "
            "p.name FROM order_items i JOIN variants v ON v.id = i.variant_id "
            "JOIN products p ON p.id = v.product_id WHERE i.order_id = ? ORDER BY i.id",
            order["id"],
        )
        total = sum(i["price_cents"] for i in items) + order["shipping_cents"]
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

    def list_products() -> list[dict[str, str]]:
        """List the catalogue: every product's id and name."""
        return [
            {"product_id": p["id"], "name": p["name"]}
            for p in world.rows("SELECT * FROM products ORDER BY name")
        ]

    def get_product(product_id: str) -> dict[str, Any]:
        """Show a product's variants with their options, price and stock.

        Args:
            product_id: The product id, e.g. 'P1234'.
        """
        product = world.one("SELECT * FROM products WHERE id = ?", product_id.strip().upper())
        if product is None:
            raise ToolError(f"no product {product_id!r}; list_products shows the catalogue")
        variants = world.rows(
            "SELECT * FROM variants WHERE product_id = ? ORDER BY id", product["id"]
        )
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

    def cancel_order(order_id: OrderId, reason: CancelReason) -> str:
        """Cancel a pending order and refund its payments to the methods that made them.

        Args:
            order_id: The order id.
            reason: Why the customer cancels.
        """
        order = writable(order_id, ("pending",), "cancel")
        paid = world.rows(
            "SELECT payment_method_id AS id, SUM(CASE kind WHEN 'payment' THEN amount_cents "
            "ELSE -amount_cents END) AS net FROM transactions WHERE order_id = ? "
            "GROUP BY payment_method_id ORDER BY payment_method_id",
            order["id"],
        )
        for line in paid:
            method = world.one("SELECT * FROM payment_methods WHERE id = ?", line["id"])
            if method is not None and line["net"] > 0:
                move_money(order, method, "refund", line["net"])
        conn.execute(
            "UPDATE variants SET stock = stock + (SELECT COUNT(*) FROM order_items i "
            "WHERE i.order_id = ?1 AND i.variant_id = variants.id) "
            "WHERE id IN (SELECT variant_id FROM order_items WHERE order_id = ?1)",
            (order["id"],),
        )
        conn.execute(
            "UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE id = ?",
            (reason, order["id"]),
        )
        conn.commit()
        return f"Order {order['id']} cancelled; payments refunded."

    def modify_order_address(
        order_id: OrderId, street: str, city: str, state: State, zip_code: Zip
    ) -> str:
        """Change the shipping address of a pending order.

        Args:
            order_id: The order id.
            street: House number, street and any apartment.
            city: City.
            state: Two-letter state code.
            zip_code: Five-digit zip code.
        """
        order = writable(order_id, ("pending",), "modify the address of")
        address = normalise_address(street, city, state, zip_code)
        if address == (order["street"], order["city"], order["state"], order["zip"]):
            raise ToolError(f"order {order['id']} already ships to that address")
        conn.execute(
            "UPDATE orders SET street = ?, city = ?, state = ?, zip = ? WHERE id = ?",
            (*address, order["id"]),
        )
        conn.commit()
        return f"Order {order['id']} will ship to {', '.join(address)}."

    def modify_customer_address(
        customer_id: CustomerId, street: str, city: str, state: State, zip_code: Zip
    ) -> str:
        """Change a customer's default address (existing orders keep theirs).

        Args:
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
        conn.execute(
            "UPDATE customers SET street = ?, city = ?, state = ?, zip = ? WHERE id = ?",
            (*address, customer_id),
        )
        conn.commit()
        return f"Default address of {customer_id} is now {', '.join(address)}."

    def modify_order_items(
        order_id: OrderId,
        item_ids: list[ItemId],
        new_variant_ids: list[VariantId],
        payment_method_id: PaymentId,
    ) -> str:
        """Change items of a pending order to other variants of the same products.

        Args:
            order_id: The order id.
            item_ids: The items to change (item ids from get_order).
            new_variant_ids: The variant each item becomes, in the same order.
            payment_method_id: Pays a price increase, or receives a price decrease.
        """
        order = writable(order_id, ("pending",), "modify the items of")
        pairs, difference = swaps(order, item_ids, new_variant_ids, "change")
        settle(order, payment_of(payment_method_id, order), difference)
        apply_swaps(pairs, "ordered")
        conn.commit()
        return f"Items of {order['id']} changed; price difference {money(difference)}."

    def return_items(
        order_id: OrderId, item_ids: list[ItemId], refund_payment_method_id: PaymentId
    ) -> str:
        """Return items of a delivered order and refund their price.

        Args:
            order_id: The order id.
            item_ids: The items to return (item ids from get_order).
            refund_payment_method_id: The original payment method or the customer's gift card.
        """
        order = writable(order_id, ("delivered",), "return items of")
        items = order_items(order, item_ids)
        method = payment_of(refund_payment_method_id, order)
        refundable(method, order)
        refund = sum(item["price_cents"] for item in items)
        move_money(order, method, "refund", refund)
        for item in items:
            conn.execute("UPDATE order_items SET status = 'returned' WHERE id = ?", (item["id"],))
            conn.execute(
                "UPDATE variants SET stock = stock + 1 WHERE id = ?", (item["variant_id"],)
            )
        conn.commit()
        return f"Returned {len(items)} item(s) of {order['id']}; refunded {money(refund)}."

    def exchange_items(
        order_id: OrderId,
        item_ids: list[ItemId],
        new_variant_ids: list[VariantId],
        payment_method_id: PaymentId,
    ) -> str:
        """Exchange items of a delivered order for other variants of the same products.

        Args:
            order_id: The order id.
            item_ids: The items to exchange (item ids from get_order).
            new_variant_ids: The variant each item is exchanged for, in the same order.
            payment_method_id: Pays a price increase, or receives a price decrease.
        """
        order = writable(order_id, ("delivered",), "exchange items of")
        pairs, difference = swaps(order, item_ids, new_variant_ids, "exchange")
        settle(order, payment_of(payment_method_id, order), difference)
        apply_swaps(pairs, "exchanged")
        conn.commit()
        return f"Exchanged {len(pairs)} item(s) of {order['id']}; difference {money(difference)}."

    def refund_shipping(order_id: OrderId, refund_payment_method_id: PaymentId) -> str:
        """Refund the shipping fee of a delivered order that arrived late.

        Args:
            order_id: The order id.
            refund_payment_method_id: The original payment method or the customer's gift card.
        """
        order = writable(order_id, ("delivered",), "refund shipping of")
        if not order["delivered_late"]:
            raise world.refuse(f"refund shipping of {order['id']}, which was not delivered late")
        if order["shipping_refunded"]:
            raise world.refuse(f"refund shipping of {order['id']} a second time")
        method = payment_of(refund_payment_method_id, order)
        refundable(method, order)
        move_money(order, method, "refund", order["shipping_cents"])
        conn.execute("UPDATE orders SET shipping_refunded = 1 WHERE id = ?", (order["id"],))
        conn.commit()
        return f"Refunded shipping of {order['id']}: {money(order['shipping_cents'])}."

    products = sorted({v.product_id for v in store(world.db_seed).variants.values()})
    return [
        find_customer_by_email,
        closed(
            find_customer_by_name_zip, first_name=FIRST_NAMES, last_name=LAST_NAMES, zip_code=ZIPS
        ),
        get_customer,
        list_orders,
        get_order,
        list_products,
        closed(get_product, product_id=products),
        cancel_order,
        modify_order_address,
        modify_customer_address,
        modify_order_items,
        return_items,
        exchange_items,
        refund_shipping,
    ]


def _method(row: sqlite3.Row) -> dict[str, Any]:
    if row["kind"] == "card":
        return {"payment_method_id": row["id"], "kind": "card", "last4": row["last4"]}
    return {
        "payment_method_id": row["id"],
        "kind": "gift_card",
        "balance": money(row["balance_cents"]),
    }


def replay(world: World, calls: list[ToolCall]) -> None:
    """Run tool calls on ``world`` (``finish`` is skipped), raising on the first failure.

    Raises:
        ToolError: If a call fails; gold plans never do, so this signals a bug.
    """
    tools = {fn.__name__: fn for fn in make_tools(world)}
    for call in calls:
        if call.name != "finish":
            tools[call.name](**call.arguments)
