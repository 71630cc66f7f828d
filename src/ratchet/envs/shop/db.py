"""The shop's database: schema, deterministic generation from a seed, copies and comparison.

Each of :data:`DB_SEEDS` seeds builds one small store (tens of customers and products). The
base database is built once per seed and cached; every session gets its own in-memory copy made
with SQLite's backup API, which takes well under a millisecond at this size.
"""

from __future__ import annotations

import functools
import itertools
import random
import sqlite3
import threading
from dataclasses import dataclass

DB_SEEDS = 64
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

_FIRST = [
    "Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jia", "Kofi", "Lena",
    "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Uma", "Victor", "Wen",
    "Yusuf", "Zoe",
]  # fmt: skip
_LAST = [
    "Lee", "Garcia", "Novak", "Okafor", "Silva", "Kim", "Patel", "Muller", "Rossi", "Haddad",
    "Ito", "Kowalski", "Nguyen", "Brown", "Santos", "Larsen", "Moreau", "Ahmed",
]  # fmt: skip
_STREETS = [
    "Oak St", "Maple Ave", "Cedar Ln", "Pine Rd", "Elm St", "Birch Way", "Willow Dr",
    "Lake View Rd", "Hill St", "River Rd", "Park Ave", "Sunset Blvd", "Mill Ln", "Station Rd",
]  # fmt: skip
CITIES = [
    ("Springfield", "IL", "62701"), ("Austin", "TX", "78701"), ("Portland", "OR", "97201"),
    ("Madison", "WI", "53703"), ("Boulder", "CO", "80302"), ("Raleigh", "NC", "27601"),
    ("Tucson", "AZ", "85701"), ("Albany", "NY", "12207"), ("Fresno", "CA", "93721"),
    ("Savannah", "GA", "31401"), ("Boise", "ID", "83702"), ("Omaha", "NE", "68102"),
]  # fmt: skip
FIRST_NAMES = tuple(_FIRST)
LAST_NAMES = tuple(_LAST)
ZIPS = tuple(zip_code for _, _, zip_code in CITIES)
"""Every first name, last name and zip code a customer of any store can have."""
# Product name -> option dimensions -> values; each store stocks a seeded subset.
_PRODUCTS: dict[str, dict[str, list[str]]] = {
    "T-Shirt": {"color": ["black", "white", "navy", "red"], "size": ["S", "M", "L", "XL"]},
    "Running Shoes": {"color": ["black", "grey", "blue"], "size": ["7", "8", "9", "10", "11"]},
    "Desk Lamp": {"color": ["black", "white", "brass"], "bulb": ["LED", "halogen"]},
    "Backpack": {"color": ["green", "black", "grey"], "capacity": ["20L", "30L", "40L"]},
    "Water Bottle": {"capacity": ["500ml", "750ml", "1L"], "material": ["steel", "plastic"]},
    "Headphones": {"color": ["black", "silver", "blue"], "connection": ["wired", "wireless"]},
    "Coffee Maker": {"capacity": ["4 cups", "8 cups", "12 cups"], "color": ["black", "steel"]},
    "Yoga Mat": {"thickness": ["4mm", "6mm", "8mm"], "color": ["purple", "teal", "black"]},
    "Jacket": {"color": ["olive", "black", "navy"], "size": ["S", "M", "L", "XL"]},
    "Wall Clock": {"style": ["modern", "classic"], "color": ["black", "white", "wood"]},
    "Keyboard": {"layout": ["US", "UK"], "switch": ["linear", "tactile", "clicky"]},
    "Sunglasses": {"frame": ["black", "tortoise", "gold"], "lens": ["grey", "brown"]},
    "Tent": {"size": ["2-person", "4-person"], "color": ["orange", "green", "blue"]},
    "Blender": {"power": ["600W", "900W", "1200W"], "color": ["red", "black"]},
    "Notebook": {"size": ["A5", "A4"], "paper": ["lined", "dotted", "blank"]},
    "Umbrella": {"size": ["compact", "full"], "color": ["black", "yellow", "navy"]},
    "Office Chair": {"color": ["black", "grey"], "armrests": ["fixed", "adjustable"]},
    "Bicycle Helmet": {"size": ["S", "M", "L"], "color": ["white", "matte black", "red"]},
    "Scarf": {"material": ["wool", "cotton"], "color": ["grey", "burgundy", "camel"]},
    "Tea Kettle": {"capacity": ["1L", "1.7L"], "finish": ["steel", "matte white", "copper"]},
}
_N_CUSTOMERS = 30
_N_PRODUCTS = 14


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


_COPY_LOCK = threading.Lock()


def money(cents: int) -> str:
    """Format cents as dollars, e.g. ``1999 -> "$19.99"``."""
    return f"${cents / 100:.2f}"


def random_address(rng: random.Random) -> Address:
    """Draw an address from the street and city pools."""
    street = f"{rng.randint(1, 999)} {rng.choice(_STREETS)}"
    if rng.random() < 0.3:
        street += f" Apt {rng.randint(1, 40)}"
    city, state, zip_code = rng.choice(CITIES)
    return Address(street, city, state, zip_code)


@functools.lru_cache(maxsize=DB_SEEDS)
def store(db_seed: int) -> Store:
    """Return the base store for ``db_seed`` (built once, then cached).

    Raises:
        ValueError: If ``db_seed`` is outside ``0..DB_SEEDS-1``.
    """
    if not 0 <= db_seed < DB_SEEDS:
        raise ValueError(f"shop db_seed must be in 0..{DB_SEEDS - 1}; got {db_seed}")
    rng = random.Random(f"shop-db:{db_seed}")
    ids = _Ids(rng)
    variants = _catalog(rng, ids)
    customers: dict[str, Customer] = {}
    payments: dict[str, Payment] = {}
    orders: dict[str, Order] = {}
    names = rng.sample(list(itertools.product(_FIRST, _LAST)), _N_CUSTOMERS)
    variant_ids = list(variants)
    for first, last in names:
        customer_id = f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"
        mine = _payments(rng, ids, customer_id)
        payments.update((p.id, p) for p in mine)
        address = random_address(rng)
        placed = [
            _order(rng, ids, customer_id, address, mine, variants, variant_ids)
            for _ in range(rng.randint(2, 6))
        ]
        orders.update((o.id, o) for o in placed)
        customers[customer_id] = Customer(
            customer_id,
            first,
            last,
            f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com",
            address,
            tuple(p.id for p in mine),
            tuple(o.id for o in placed),
        )
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    _insert(conn, customers, payments, variants, orders)
    siblings = {
        v.id: tuple(
            w
            for w in variants.values()
            if w.product_id == v.product_id and w.id != v.id and w.stock
        )
        for v in variants.values()
    }
    return Store(db_seed, customers, payments, variants, orders, conn, siblings)


def fresh_copy(db_seed: int) -> sqlite3.Connection:
    """Return a private in-memory copy of the base database for ``db_seed``."""
    base = store(db_seed)
    copy = sqlite3.connect(":memory:", check_same_thread=False)
    with _COPY_LOCK:
        base.conn.backup(copy)
    return copy


class _Ids:
    """Unique random ids, so that no id betrays the order in which things were made."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[str] = set()

    def new(self, prefix: str, digits: int) -> str:
        while True:
            candidate = f"{prefix}{self._rng.randrange(10 ** (digits - 1), 10**digits)}"
            if candidate not in self._used:
                self._used.add(candidate)
                return candidate


def _catalog(rng: random.Random, ids: _Ids) -> dict[str, Variant]:
    variants: dict[str, Variant] = {}
    for name in sorted(rng.sample(sorted(_PRODUCTS), _N_PRODUCTS)):
        product_id = ids.new("P", 4)
        dimensions = _PRODUCTS[name]
        combos = list(itertools.product(*dimensions.values()))
        base_cents = rng.randint(8, 250) * 100
        for combo in sorted(rng.sample(combos, min(len(combos), rng.randint(3, 6)))):
            options = ", ".join(
                f"{dim}: {value}" for dim, value in zip(dimensions, combo, strict=True)
            )
            price = base_cents + rng.randint(-500, 900) + rng.choice([0, 49, 99])
            stock = 0 if rng.random() < 0.2 else rng.randint(1, 15)
            variant = Variant(ids.new("V", 5), product_id, name, options, max(price, 299), stock)
            variants[variant.id] = variant
    return variants


def _payments(rng: random.Random, ids: _Ids, customer_id: str) -> list[Payment]:
    last4s = rng.sample(range(1000, 10000), 2)
    cards = [
        Payment(ids.new("card_", 7), customer_id, "card", str(last4s[i]), None)
        for i in range(rng.randint(1, 2))
    ]
    if rng.random() < 0.6:
        balance = rng.randint(500, 30000)
        cards.append(Payment(ids.new("gift_card_", 7), customer_id, "gift_card", None, balance))
    return cards


def _order(
    rng: random.Random,
    ids: _Ids,
    customer_id: str,
    home: Address,
    payments: list[Payment],
    variants: dict[str, Variant],
    variant_ids: list[str],
) -> Order:
    status = rng.choices(STATUSES, weights=[30, 15, 45, 10])[0]
    picked = rng.sample(variant_ids, rng.randint(1, 4))
    items = tuple(Item(ids.new("I", 6), v, variants[v].price_cents) for v in picked)
    address = home if rng.random() < 0.8 else random_address(rng)
    return Order(
        id=ids.new("#W", 7),
        customer_id=customer_id,
        status=status,
        address=address,
        payment_id=rng.choice(payments).id,
        shipping_cents=rng.choice([499, 599, 799, 999, 1250]),
        delivered_late=status == "delivered" and rng.random() < 0.35,
        items=items,
    )


def _insert(
    conn: sqlite3.Connection,
    customers: dict[str, Customer],
    payments: dict[str, Payment],
    variants: dict[str, Variant],
    orders: dict[str, Order],
) -> None:
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


def base_rows(db_seed: int, table: str, rowids: list[int]) -> list[tuple[object, ...]]:
    """Return the base store's rows of ``table`` at ``rowids`` (those that exist)."""
    base = store(db_seed)
    marks = ", ".join("?" * len(rowids))
    with _COPY_LOCK:
        return list(base.conn.execute(f"SELECT * FROM {table} WHERE rowid IN ({marks})", rowids))


def _address_row(address: Address) -> tuple[str, str, str, str]:
    return (address.street, address.city, address.state, address.zip)
