"""Generating a store from its seed: customers, catalogue, payment methods and orders.

Everything is drawn from one ``random.Random`` seeded by the db seed, in a fixed order, so a
seed always builds the same store; ids are random too, so none betrays the order in which
things were made.
"""

from __future__ import annotations

import itertools
import random
import sqlite3

from ratchet.envs.shop.schema import (
    STATUSES,
    Address,
    Customer,
    Item,
    Order,
    Payment,
    Store,
    Variant,
    load,
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


def random_address(rng: random.Random) -> Address:
    """Draw an address from the street and city pools."""
    street = f"{rng.randint(1, 999)} {rng.choice(_STREETS)}"
    if rng.random() < 0.3:
        street += f" Apt {rng.randint(1, 40)}"
    city, state, zip_code = rng.choice(CITIES)
    return Address(street, city, state, zip_code)


def generate(db_seed: int) -> Store:
    """Build the store for ``db_seed``: draw its records and load them into a new database."""
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
    load(conn, customers, payments, variants, orders)
    siblings = {
        v.id: tuple(
            w
            for w in variants.values()
            if w.product_id == v.product_id and w.id != v.id and w.stock
        )
        for v in variants.values()
    }
    return Store(db_seed, customers, payments, variants, orders, conn, siblings)


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
