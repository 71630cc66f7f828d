"""Shop verification: replay the gold writes on a fresh copy, compare states, check the facts.

The final database must hash the same as the database the gold calls produce; the answer must
state every fact the customer asked for (computed on the gold database, so a balance asked for
"after all that" includes the refunds); and no policy violation may have been attempted.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.envs.shop.db import STATUSES, money, store
from ratchet.envs.shop.state import Delta, delta, differences, fingerprint
from ratchet.envs.shop.tools import World, replay

MAX_ANSWER_CHARS = 1000
FEEDBACK_ROWS = 8

_AMOUNT = re.compile(r"(?<![\w#.,])\$?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{2}))?(?![\d,])")
_ORDER_ID = re.compile(r"#?\bW(\d{7})\b", re.IGNORECASE)
_STATUS = re.compile(r"\b(" + "|".join(STATUSES) + r"|canceled)\b", re.IGNORECASE)


@dataclass(frozen=True)
class FactValue:
    """A fact the customer asked for, with its value in the gold final state.

    Attributes:
        kind: ``status``, ``total``, ``balance`` or ``pending_orders``.
        what: What was asked, for feedback (never the value).
        value: The value as the oracle states it.
        cents: The amount, for ``total`` and ``balance``.
        ids: The order ids, for ``pending_orders``.
    """

    kind: str
    what: str
    value: str
    cents: int = 0
    ids: tuple[str, ...] = ()


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


def gold_calls(params: dict[str, Any]) -> list[ToolCall]:
    """Return the identity lookup followed by the gold writes (without ``finish``)."""
    customer = store(params["db_seed"]).customers[params["customer_id"]]
    if params["identify"] == "email":
        lookup = ToolCall("find_customer_by_email", {"email": customer.email})
    else:
        lookup = ToolCall(
            "find_customer_by_name_zip",
            {
                "first_name": customer.first_name,
                "last_name": customer.last_name,
                "zip_code": customer.address.zip,
            },
        )
    writes = [ToolCall(w["name"], dict(w["arguments"])) for w in params["writes"]]
    return [lookup, *writes]


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
        if kind in ("status", "total"):
            order = world.one("SELECT * FROM orders WHERE id = ?", fact["order_id"])
            assert order is not None
            if kind == "status":
                what = f"the status of order {order['id']}"
                values.append(FactValue(kind, what, order["status"]))
            else:
                items = world.one(
                    "SELECT COALESCE(SUM(price_cents), 0) AS c FROM order_items WHERE order_id = ?",
                    order["id"],
                )
                assert items is not None
                cents = items["c"] + order["shipping_cents"]
                what = f"the total of order {order['id']}"
                values.append(FactValue(kind, what, money(cents), cents=cents))
        elif kind == "balance":
            method = world.one(
                "SELECT balance_cents FROM payment_methods WHERE id = ?", fact["payment_method_id"]
            )
            assert method is not None
            cents = method["balance_cents"]
            values.append(FactValue(kind, "the gift card balance", money(cents), cents=cents))
        else:
            rows = world.rows(
                "SELECT id FROM orders WHERE customer_id = ? AND status = 'pending' ORDER BY id",
                fact["customer_id"],
            )
            ids = tuple(r["id"] for r in rows)
            values.append(FactValue(kind, "which orders are pending", ", ".join(ids), ids=ids))
    return tuple(values)


def unstated(answer: str, facts: tuple[FactValue, ...], own_orders: set[str]) -> list[str]:
    """Return what the answer fails to state (or contradicts), one phrase per fact.

    A status counts only if the answer names no status that was not asked for, and a list of
    pending orders only if it names none of the customer's other orders, so an answer that
    lists every possibility states nothing.
    """
    amounts = {
        int(whole.replace(",", "")) * 100 + int(cents or 0)
        for whole, cents in _AMOUNT.findall(answer)
    }
    statuses = {s.lower().replace("canceled", "cancelled") for s in _STATUS.findall(answer)}
    mentioned = {f"#W{digits}" for digits in _ORDER_ID.findall(answer)}
    wanted_statuses = {f.value for f in facts if f.kind == "status"}
    missing = []
    for fact in facts:
        if fact.kind == "status":
            stated = fact.value in statuses and statuses <= wanted_statuses
        elif fact.kind == "pending_orders":
            stated = set(fact.ids) <= mentioned and not (mentioned & own_orders) - set(fact.ids)
        else:
            stated = fact.cents in amounts
        if not stated:
            missing.append(fact.what)
    return missing


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
        own = set(store(params["db_seed"]).customers[params["customer_id"]].order_ids)
        if len(text) > MAX_ANSWER_CHARS:
            missing = [f.what for f in gold.facts]
            problems.append(
                f"the answer is over {MAX_ANSWER_CHARS} characters; state facts briefly"
            )
        else:
            missing = unstated(text, gold.facts, own)
            if missing:
                problems.append("the final answer does not state " + ", ".join(missing))
    metrics = {
        "violations": float(len(world.violations)),
        "differing_rows": float(len(differing)),
        "facts_stated": 1.0 - len(missing) / len(gold.facts) if gold.facts else 1.0,
    }
    if problems:
        return Verdict.of(False, "\n".join(problems), **metrics)
    return Verdict.of(True, "the database matches the expected outcome", **metrics)
