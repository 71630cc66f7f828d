"""Shop verification: replay the gold writes on a fresh copy, compare states, check the facts.

The final database must hash the same as the database the gold calls produce; the answer must
state every fact the customer asked for (computed on the gold database, so a balance asked for
"after all that" includes the refunds), each one the session's reads showed (a status guessed
without reading the order does not count, however lucky); and no policy violation may have
been attempted.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.envs.shop.db import store
from ratchet.envs.shop.schema import STATUSES
from ratchet.envs.shop.state import Delta, delta, differences, fingerprint
from ratchet.envs.shop.tools import replay
from ratchet.envs.shop.values import money
from ratchet.envs.shop.world import World

MAX_ANSWER_CHARS = 1000
FEEDBACK_ROWS = 8

# A number that is not part of a word or an id: "$1,234.50", "196.7", "45". A decimal point
# must be followed by digits to belong to the number (not a full stop).
_AMOUNT = re.compile(r"(?<![\w#.,])\$?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\d,]|\.\d)")
_ORDER_ID = re.compile(r"#?\bW(\d+)\b", re.IGNORECASE)
_STATUS = re.compile(r"\b(" + "|".join(STATUSES) + r"|canceled)\b", re.IGNORECASE)
# Customer ids look like ``rosa_haddad_8262``; any digit run counts, so a padded id is another id.
_CUSTOMER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d+\b", re.IGNORECASE)


@dataclass(frozen=True)
class FactValue:
    """A fact the customer asked for, with its value in the gold final state.

    Attributes:
        kind: ``customer_id``, ``status``, ``total``, ``balance`` or ``pending_orders``.
        what: What was asked, for feedback (never the value).
        value: The value as the oracle states it.
        cents: The amount, for ``total`` and ``balance``.
        ids: The orders the fact is about: the pending ones, or the order of a status or total.
        shown_by: The reads that show it: alternatives, each the :meth:`World.show` keys
            (``"order:#W1234567"``) that together show the fact.
    """

    kind: str
    what: str
    value: str
    cents: int = 0
    ids: tuple[str, ...] = ()
    shown_by: tuple[tuple[str, ...], ...] = ()

    def looked_up(self, world: World) -> bool:
        """Whether the session playing ``world`` read this fact (one alternative in full)."""
        return any(all(key in world.shown for key in keys) for keys in self.shown_by)


@dataclass(frozen=True)
class Expected:
    """What the gold calls leave behind.

    Attributes:
        changes: The gold final database's :func:`~ratchet.envs.shop.state.delta`.
        fingerprint: Its canonical hash.
        facts: The requested facts, valued on that database.
    """

    changes: Delta
    fingerprint: str
    facts: tuple[FactValue, ...]


def lookup_call(params: dict[str, Any], by_email: bool = True) -> ToolCall:
    """Return the call that confirms the customer's identity, by email or by name and zip."""
    customer = store(params["db_seed"]).customers[params["customer_id"]]
    if by_email:
        return ToolCall("find_customer_by_email", {"email": customer.email})
    return ToolCall(
        "find_customer_by_name_zip",
        {
            "first_name": customer.first_name,
            "last_name": customer.last_name,
            "zip_code": customer.address.zip,
        },
    )


def gold_calls(params: dict[str, Any]) -> list[ToolCall]:
    """Return the identity lookup followed by the gold writes (without ``finish``)."""
    writes = [ToolCall(w["name"], dict(w["arguments"])) for w in params["writes"]]
    return [lookup_call(params), *writes]


def gold_world(params: dict[str, Any]) -> World:
    """Return a fresh world with the gold calls applied (the caller closes it)."""
    world = World.open(params["db_seed"])
    try:
        replay(world, gold_calls(params))
    except Exception:
        world.close()
        raise
    return world


@functools.lru_cache(maxsize=4096)
def _expected(params_json: str) -> Expected:
    params = json.loads(params_json)
    world = gold_world(params)
    try:
        changes = delta(world.conn, world.db_seed)
        return Expected(changes, fingerprint(changes), _facts(world, params["facts"]))
    finally:
        world.close()


def expected(params: dict[str, Any]) -> Expected:
    """Return the gold final state's changes, hash and fact values for a task's params (cached)."""
    return _expected(json.dumps(params, sort_keys=True))


def _facts(world: World, facts: list[dict[str, str]]) -> tuple[FactValue, ...]:
    values = []
    for fact in facts:
        kind = fact["kind"]
        shown: tuple[tuple[str, ...], ...]
        if kind == "customer_id":
            shown = ((f"customer_id:{fact['customer_id']}",),)
            values.append(FactValue(kind, "your customer id", fact["customer_id"], shown_by=shown))
        elif kind in ("status", "total"):
            order = world.one("SELECT * FROM orders WHERE id = ?", fact["order_id"])
            assert order is not None
            # get_order shows one order; list_orders shows every order's status and total.
            shown = ((f"order:{order['id']}",), (f"orders:{order['customer_id']}",))
            if kind == "status":
                what = f"the status of order {order['id']}"
                values.append(
                    FactValue(kind, what, order["status"], ids=(order["id"],), shown_by=shown)
                )
            else:
                items = world.one(
                    "SELECT COALESCE(SUM(price_cents), 0) AS c FROM order_items WHERE order_id = ?",
                    order["id"],
                )
                assert items is not None
                cents = items["c"] + order["shipping_cents"]
                what = f"the total of order {order['id']}"
                values.append(
                    FactValue(kind, what, money(cents), cents, (order["id"],), shown_by=shown)
                )
        elif kind == "balance":
            method = world.one(
                "SELECT balance_cents FROM payment_methods WHERE id = ?", fact["payment_method_id"]
            )
            assert method is not None
            cents = method["balance_cents"]
            shown = ((f"balance:{fact['payment_method_id']}",),)
            values.append(
                FactValue(kind, "the gift card balance", money(cents), cents=cents, shown_by=shown)
            )
        else:
            customer = fact["customer_id"]
            every = world.rows(
                "SELECT id, status FROM orders WHERE customer_id = ? ORDER BY id", customer
            )
            ids = tuple(r["id"] for r in every if r["status"] == "pending")
            # list_orders shows every status at once; so does reading each order in turn.
            shown = ((f"orders:{customer}",), tuple(f"order:{r['id']}" for r in every))
            values.append(
                FactValue(kind, "which orders are pending", ", ".join(ids), ids=ids, shown_by=shown)
            )
    return tuple(values)


def unstated(answer: str, facts: tuple[FactValue, ...], written: set[str]) -> list[str]:
    """Return what the answer fails to state (or hedges), one phrase per fact.

    Each asked value must be stated, and stated alone: a status counts only if the answer
    names no status that was not asked for, an amount only if it names no other amount. When
    the facts are about orders, naming an order id that none of them is about counts against
    every fact; the orders the request changed (``written``) may be named too, except in an
    answer that lists pending orders. A customer id counts only if it is the one customer id
    the answer names. So an answer that lists candidates ("$195.70, $196.70 or $197.70") states
    nothing. Amounts may be written with or without ``$``, thousands
    separators or trailing zeros ("196.7" states $196.70).
    """
    amounts = {_cents(whole, fraction) for whole, fraction in _AMOUNT.findall(answer)}
    statuses = {s.lower().replace("canceled", "cancelled") for s in _STATUS.findall(answer)}
    customers = {c.lower() for c in _CUSTOMER_ID.findall(answer)}
    mentioned = {f"#W{digits}" for digits in _ORDER_ID.findall(answer)}
    wanted_statuses = {f.value for f in facts if f.kind == "status"}
    wanted_amounts = {f.cents for f in facts if f.kind in ("total", "balance")}
    about = {order for f in facts for order in f.ids}
    lists_pending = any(f.kind == "pending_orders" for f in facts)
    stray_orders = bool(about) and not mentioned <= about | (set() if lists_pending else written)
    missing = []
    for fact in facts:
        if fact.kind == "customer_id":
            stated = customers == {fact.value}
        elif fact.kind == "status":
            stated = fact.value in statuses and statuses <= wanted_statuses
        elif fact.kind == "pending_orders":
            stated = set(fact.ids) <= mentioned
        else:
            stated = fact.cents in amounts and amounts <= wanted_amounts
        if not stated or stray_orders:
            missing.append(fact.what)
    return missing


def _cents(whole: str, fraction: str) -> int:
    """The amount in cents, or -1 for a value that is no whole number of cents."""
    value = Decimal(f"{whole.replace(',', '')}.{fraction or '0'}") * 100
    return int(value) if value == value.to_integral_value() else -1


def judge(params: dict[str, Any], world: World, answer: str | None) -> Verdict:
    """Judge a session's world against the gold outcome of ``params``."""
    gold = expected(params)
    problems: list[str] = []
    if world.violations:
        problems.append("policy violated: " + "; ".join(world.violations))
    actual = delta(world.conn, world.db_seed)
    differing: list[str] = []
    if fingerprint(actual) != gold.fingerprint:
        differing = differences(gold.changes, actual)
        shown = differing[:FEEDBACK_ROWS]
        if len(differing) > FEEDBACK_ROWS:
            shown.append(f"... and {len(differing) - FEEDBACK_ROWS} more differing rows")
        problems.append("the database differs from the expected outcome:\n" + "\n".join(shown))
    missing: list[str] = []
    if gold.facts:
        text = answer or ""
        written = {w["arguments"].get("order_id") for w in params["writes"]} - {None}
        if len(text) > MAX_ANSWER_CHARS:
            missing = [f.what for f in gold.facts]
            problems.append(
                f"the answer is over {MAX_ANSWER_CHARS} characters; state facts briefly"
            )
        else:
            missing = unstated(text, gold.facts, written)
            if missing:
                problems.append("the final answer does not state " + ", ".join(missing))
            unread = [
                f.what for f in gold.facts if not f.looked_up(world) and f.what not in missing
            ]
            if unread:
                missing += unread
                problems.append("the session never looked up " + ", ".join(unread))
    metrics = {
        "violations": float(len(world.violations)),
        "differing_rows": float(len(differing)),
        "facts_stated": 1.0 - len(missing) / len(gold.facts) if gold.facts else 1.0,
    }
    if problems:
        return Verdict.of(False, "\n".join(problems), **metrics)
    return Verdict.of(True, "the database matches the expected outcome", **metrics)
