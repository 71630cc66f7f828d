"""The shop's oracle: what a careful agent does for a request, read by read.

The gold *writes* define the expected state; the oracle wraps them in the reads an agent needs
to find the ids it must pass (the order, the product's variants, the customer's payment
methods) and the reads that answer the customer's questions, so its trajectories make useful
demonstrations. Reads change nothing, so the verifier replays only the lookup and the writes.
"""

from __future__ import annotations

from typing import Any

from ratchet.core.tool import ToolCall
from ratchet.envs.shop.db import store
from ratchet.envs.shop.verify import expected, gold_calls


def oracle_calls(params: dict[str, Any]) -> list[ToolCall]:
    """Return the oracle's calls: lookup, reads before each write, the writes, reads, finish."""
    shop = store(params["db_seed"])
    customer_id = params["customer_id"]
    lookup, *writes = gold_calls(params)
    calls = [lookup]
    for write in writes:
        args = write.arguments
        reads = []
        if "order_id" in args:
            reads.append(ToolCall("get_order", {"order_id": args["order_id"]}))
        for variant_id in args.get("new_variant_ids", []):
            product_id = shop.variants[variant_id].product_id
            reads.append(ToolCall("get_product", {"product_id": product_id}))
        method = args.get("payment_method_id") or args.get("refund_payment_method_id")
        original = shop.orders[args["order_id"]].payment_id if "order_id" in args else None
        if write.name == "modify_customer_address" or method not in (None, original):
            reads.append(ToolCall("get_customer", {"customer_id": customer_id}))
        calls += [read for read in reads if read not in calls]
        calls.append(write)
    for fact in params["facts"]:
        if fact["kind"] == "status":
            calls.append(ToolCall("get_order", {"order_id": fact["order_id"]}))
        elif fact["kind"] == "balance":
            calls.append(ToolCall("get_customer", {"customer_id": customer_id}))
        elif fact["kind"] == "pending_orders":
            calls.append(ToolCall("list_orders", {"customer_id": customer_id}))
    return [*calls, ToolCall("finish", {"answer": oracle_answer(params)})]


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
