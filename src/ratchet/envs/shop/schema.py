"""The shop's data model, twice: Python records for sampling tasks, SQLite tables for the tools.

:func:`load` writes a generated store's records into the tables and installs the triggers that
log every change, so a session's state can later be compared by what it modified (see
``state.py``). Amounts are integer cents throughout.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

STATUSES = ("pending", "processed", "delivered", "cancelled")
CANCEL_REASONS = ("no longer needed", "ordered by mistake")

SCHEMA = """
CREATE TABLE customers (
    id TEXT PRIMARY KEY, first_name TEXT NOT NULL, last_name TEXT NOT NULL,
    email TEXT NOT NULL UNIQUE, street TEXT NOT NULL, city TEXT NOT NULL, state TEXT NOT NULL,
    zip TEXT NOT NULL);
CREATE TABLE payment_methods (
    id TEXT PRIMARY KEY, customer_id TEXT NOT NULL REFERENCES customers(id),
    kind TEXT NOT NULL CHECK (kind IN ('card', 'gift_card')), last4 TEXT,
    balance_cents INTEGER);
CREATE TABLE products (id TEXT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE variants (
    id TEXT PRIMARY KEY, product_id TEXT NOT NULL REFERENCES products(id),
    options TEXT NOT NULL, price_cents INTEGER NOT NULL, stock INTEGER NOT NULL);
CREATE TABLE orders (
    id TEXT PRIMARY KEY, customer_id TEXT NOT NULL REFERENCES customers(id),
    status TEXT NOT NULL, street TEXT NOT NULL, city TEXT NOT NULL, state TEXT NOT NULL,
    zip TEXT NOT NULL, payment_method_id TEXT NOT NULL REFERENCES payment_methods(id),
    shipping_cents INTEGER NOT NULL, delivered_late INTEGER NOT NULL,
    shipping_refunded INTEGER NOT NULL, cancel_reason TEXT);
CREATE TABLE order_items (
    id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id),
    variant_id TEXT NOT NULL REFERENCES variants(id), price_cents INTEGER NOT NULL,
    status TEXT NOT NULL);
CREATE TABLE transactions (
    order_id TEXT NOT NULL, payment_method_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('payment', 'refund')), amount_cents INTEGER NOT NULL);
"""
TABLES = (
    "customers",
    "payment_methods",
    "products",
    "variants",
    "orders",
    "order_items",
    "transactions",
)


@dataclass(frozen=True)
class Address:
    """A postal address.

    Attributes:
        street: House number and street.
        city: City.
        state: Two-letter state code.
        zip: Five-digit zip code.
    """

    street: str
    city: str
    state: str
    zip: str

    def text(self) -> str:
        """Return the address on one line."""
        return f"{self.street}, {self.city}, {self.state} {self.zip}"


@dataclass(frozen=True)
class Customer:
    """A customer as generated (the base state).

    Attributes:
        id: Customer id.
        first_name: Given name.
        last_name: Family name.
        email: Unique email address.
        address: Default shipping address.
        payment_ids: The customer's payment method ids (cards first).
        order_ids: The customer's order ids.
    """

    id: str
    first_name: str
    last_name: str
    email: str
    address: Address
    payment_ids: tuple[str, ...]
    order_ids: tuple[str, ...]


@dataclass(frozen=True)
class Payment:
    """A payment method as generated.

    Attributes:
        id: Payment method id.
        customer_id: Owner.
        kind: ``card`` or ``gift_card``.
        last4: Last four card digits (cards only).
        balance_cents: Remaining balance (gift cards only).
    """

    id: str
    customer_id: str
    kind: str
    last4: str | None
    balance_cents: int | None


@dataclass(frozen=True)
class Variant:
    """One purchasable variant of a product.

    Attributes:
        id: Variant id.
        product_id: Product id.
        product: Product name.
        options: Canonical option text, e.g. ``"color: black, size: M"``.
        price_cents: Unit price.
        stock: Units in stock.
    """

    id: str
    product_id: str
    product: str
    options: str
    price_cents: int
    stock: int


@dataclass(frozen=True)
class Item:
    """One line of an order.

    Attributes:
        id: Item id.
        variant_id: The variant bought.
        price_cents: Price paid.
    """

    id: str
    variant_id: str
    price_cents: int


@dataclass(frozen=True)
class Order:
    """An order as generated.

    Attributes:
        id: Order id, e.g. ``"#W1234567"``.
        customer_id: Owner.
        status: One of :data:`STATUSES`.
        address: Shipping address.
        payment_id: The payment method that paid for it.
        shipping_cents: Shipping fee.
        delivered_late: Whether a delivered order arrived late.
        items: Its items, each of a distinct variant.
    """

    id: str
    customer_id: str
    status: str
    address: Address
    payment_id: str
    shipping_cents: int
    delivered_late: bool
    items: tuple[Item, ...]

    @property
    def total_cents(self) -> int:
        """Items plus shipping."""
        return sum(item.price_cents for item in self.items) + self.shipping_cents


@dataclass(frozen=True)
class Store:
    """One seeded store: its records in Python (for task sampling) and as a SQLite database.

    Attributes:
        seed: The db seed that built it.
        customers: By id.
        payments: By id.
        variants: By id.
        orders: By id.
        conn: The base database; read only (sessions work on copies).
        siblings: Variant id -> the other variants of its product that are in stock.
    """

    seed: int
    customers: dict[str, Customer]
    payments: dict[str, Payment]
    variants: dict[str, Variant]
    orders: dict[str, Order]
    conn: sqlite3.Connection
    siblings: dict[str, tuple[Variant, ...]]


def load(
    conn: sqlite3.Connection,
    customers: dict[str, Customer],
    payments: dict[str, Payment],
    variants: dict[str, Variant],
    orders: dict[str, Order],
) -> None:
    """Create the tables in ``conn``, insert the records, and start logging changes."""
    conn.executescript(SCHEMA)
    conn.executemany(
        "INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (c.id, c.first_name, c.last_name, c.email, *_address_row(c.address))
            for c in customers.values()
        ],
    )
    conn.executemany(
        "INSERT INTO payment_methods VALUES (?, ?, ?, ?, ?)",
        [(p.id, p.customer_id, p.kind, p.last4, p.balance_cents) for p in payments.values()],
    )
    products = {(v.product_id, v.product) for v in variants.values()}
    conn.executemany("INSERT INTO products VALUES (?, ?)", sorted(products))
    conn.executemany(
        "INSERT INTO variants VALUES (?, ?, ?, ?, ?)",
        [(v.id, v.product_id, v.options, v.price_cents, v.stock) for v in variants.values()],
    )
    for order in orders.values():
        conn.execute(
            "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
            (
                order.id,
                order.customer_id,
                order.status,
                *_address_row(order.address),
                order.payment_id,
                order.shipping_cents,
                int(order.delivered_late),
                "no longer needed" if order.status == "cancelled" else None,
            ),
        )
        conn.executemany(
            "INSERT INTO order_items VALUES (?, ?, ?, ?, ?)",
            [(i.id, order.id, i.variant_id, i.price_cents, "ordered") for i in order.items],
        )
        paid = [(order.id, order.payment_id, "payment", order.total_cents)]
        if order.status == "cancelled":
            paid.append((order.id, order.payment_id, "refund", order.total_cents))
        conn.executemany("INSERT INTO transactions VALUES (?, ?, ?, ?)", paid)
    _track_changes(conn)
    conn.commit()


def _track_changes(conn: sqlite3.Connection) -> None:
    """Log the rowid of every row any statement touches, so a state is compared by its changes.

    The triggers live in the base database and are copied with it; the base itself is never
    written after this, so a session's ``_changes`` lists exactly what it modified.
    """
    conn.execute("CREATE TABLE _changes (tbl TEXT NOT NULL, row INTEGER NOT NULL)")
    for table in TABLES:
        for event, rows in (
            ("INSERT", ["NEW.rowid"]),
            ("UPDATE", ["OLD.rowid", "NEW.rowid"]),
            ("DELETE", ["OLD.rowid"]),
        ):
            inserts = " ".join(f"INSERT INTO _changes VALUES ('{table}', {r});" for r in rows)
            conn.execute(
                f"CREATE TRIGGER {table}_{event.lower()} AFTER {event} ON {table} "
                f"BEGIN {inserts} END"
            )


def _address_row(address: Address) -> tuple[str, str, str, str]:
    return (address.street, address.city, address.state, address.zip)
