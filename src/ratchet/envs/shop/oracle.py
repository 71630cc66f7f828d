"""The shop's oracle: the shortest plan a careful agent follows for a request.

The gold *writes* define the expected state; the oracle wraps them in the reads an agent cannot
do without: the order, for item ids or the payment method that paid it; the product, for
variant ids; the customer, for any other payment method; and after the writes, one read per
question asked (none for the customer's id, which the lookup shows). A write whose arguments
the request spells out (cancel a named order, ship it to a given address, change the default
address) needs no read. Reads change nothing, so the verifier replays only the lookup and the
writes. :func:`difficulty_of` counts this plan.
"""

from __future__ import annotations

from typing import Any

from ratchet.core.tool import ToolCall
from ratchet.envs.shop.db import store
from ratchet.envs.shop.schema import Store
from ratchet.envs.shop.verify import expected, gold_calls, lookup_call


def oracle_calls(params: dict[str, Any], by_email: bool = True) -> list[ToolCall]:
    """Return the oracle's calls: lookup, the shortest plan, and ``finish`` stating the facts.

    Args:
        params: The task's params.
        by_email: Confirm identity by email (else by name and zip code), as the customer did.
    """
    lookup = lookup_call(params, by_email)
    return [lookup, *plan(params), ToolCall("finish", {"answer": oracle_answer(params)})]


def plan(params: dict[str, Any]) -> list[ToolCall]:
    """Return the shortest plan's actions after the identity lookup, without ``finish``."""
    shop = store(params["db_seed"])
    calls: list[ToolCall] = []
    for write in gold_calls(params)[1:]:
        calls += [read for read in _reads_for(shop, params, write) if read not in calls]
        calls.append(write)
    asked: list[ToolCall] = []
    for fact in params["facts"]:
        read = _read_for_fact(params, fact)
        if read is not None and read not in asked:
            asked.append(read)
    return calls + asked


def difficulty_of(params: dict[str, Any]) -> int:
    """Return how many tool calls the request takes before ``finish``, the lookup included."""
    return 1 + len(plan(params))


def _reads_for(shop: Store, params: dict[str, Any], write: ToolCall) -> list[ToolCall]:
    args = write.arguments
    if write.name in ("cancel_order", "modify_order_address", "modify_customer_address"):
        return []
    order = shop.orders[args["order_id"]]
    method = args.get("payment_method_id") or args.get("refund_payment_method_id")
    reads = []
    if "item_ids" in args or method == order.payment_id:
        reads.append(ToolCall("get_order", {"order_id": order.id}))
    for variant_id in args.get("new_variant_ids", []):
        product_id = shop.variants[variant_id].product_id
        reads.append(ToolCall("get_product", {"product_id": product_id}))
    if method != order.payment_id:
        reads.append(ToolCall("get_customer", {"customer_id": params["customer_id"]}))
    return reads


def _read_for_fact(params: dict[str, Any], fact: dict[str, str]) -> ToolCall | None:
    if fact["kind"] == "customer_id":
        return None
    if fact["kind"] in ("status", "total"):
        return ToolCall("get_order", {"order_id": fact["order_id"]})
    if fact["kind"] == "balance":
        return ToolCall("get_customer", {"customer_id": params["customer_id"]})
    return ToolCall("list_orders", {"customer_id": params["customer_id"]})


def oracle_answer(params: dict[str, Any]) -> str:
    """Word the final answer the oracle gives: each requested fact, or a confirmation."""
    facts = expected(params).facts
    if not facts:
        return f"Done: made the {len(params['writes'])} requested change(s)."
    said = "; ".join(
        f"your pending orders are {f.value}"
        if f.kind == "pending_orders"
        else f"{f.what} is {f.value}"
        for f in facts
    )
    return said[0].upper() + said[1:] + "."
