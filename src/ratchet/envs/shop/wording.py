"""How a customer words a request: the instruction rendered from a task's params.

The sampler and hindsight relabelling share this wording, so a relabelled request reads exactly
like a sampled one.
"""

from __future__ import annotations

from typing import Any, Literal

from ratchet.envs.shop.db import store
from ratchet.envs.shop.schema import Order, Store

Identify = Literal["email", "name_zip"]
Fact = dict[str, str]

_REASON_TEXT = {
    "no longer needed": "I no longer need it",
    "ordered by mistake": "I ordered it by mistake",
}


class Unspeakable(ValueError):
    """The writes cannot be worded unambiguously (e.g. two identical items in one order)."""


def render(params: dict[str, Any], identify: Identify = "email") -> str:
    """Word a request from its params, as the customer would write it.

    Args:
        params: The task's params.
        identify: Whether the customer gives their email, or their name and zip code.

    Raises:
        Unspeakable: If an item could not be named unambiguously by product and options.
    """
    shop = store(params["db_seed"])
    customer = shop.customers[params["customer_id"]]
    name = f"{customer.first_name} {customer.last_name}"
    if identify == "email":
        lines = [f"Hi, this is {name} ({customer.email})."]
    else:
        lines = [f"Hi, this is {name}, zip code {customer.address.zip}."]
    touched = {w["arguments"].get("order_id") for w in params["writes"]}
    variants = {i.id: i.variant_id for o in touched if o for i in shop.orders[o].items}
    new_default: dict[str, str] | None = None
    for write in params["writes"]:
        args = write["arguments"]
        lines.append(_sentence(shop, write["name"], args, variants, new_default))
        if write["name"] == "modify_customer_address":
            new_default = args
        if write["name"] in ("modify_order_items", "exchange_items"):
            variants.update(zip(args["item_ids"], args["new_variant_ids"], strict=True))
    lines += _questions(params["facts"], bool(params["writes"]))
    return " ".join(lines)


def _sentence(
    shop: Store,
    tool: str,
    args: dict[str, Any],
    variants: dict[str, str],
    new_default: dict[str, str] | None,
) -> str:
    order = shop.orders.get(args.get("order_id", ""))
    if tool == "modify_customer_address":
        return f"Please change my default address to {_where(args)}."
    assert order is not None
    if tool == "cancel_order":
        return f"Please cancel order {order.id}: {_REASON_TEXT[args['reason']]}."
    if tool == "modify_order_address":
        if new_default is not None and _where(new_default) == _where(args):
            return f"Please ship my pending order {order.id} to that new address as well."
        return f"Please ship my pending order {order.id} to {_where(args)} instead."
    if tool == "refund_shipping":
        where = _pay_phrase(shop, order, args["refund_payment_method_id"])
        return f"Order {order.id} arrived late; please refund its shipping fee to {where}."
    names = [_item_name(shop, order, variants, item) for item in args["item_ids"]]
    if tool == "return_items":
        where = _pay_phrase(shop, order, args["refund_payment_method_id"])
        return f"I want to return {_join(names)} from order {order.id}, refunded to {where}."
    changes = [
        f"{item} for the one with {shop.variants[new].options}"
        for item, new in zip(names, args["new_variant_ids"], strict=True)
    ]
    method = _pay_phrase(shop, order, args["payment_method_id"])
    if tool == "modify_order_items":
        return (
            f"In my pending order {order.id}, please swap {_join(changes)}; settle any price "
            f"difference with {method}."
        )
    return (
        f"Please exchange {_join(changes)} from my delivered order {order.id}; settle any price "
        f"difference with {method}."
    )


def _where(args: dict[str, str]) -> str:
    return f"{args['street']}, {args['city']}, {args['state']} {args['zip_code']}"


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _item_name(shop: Store, order: Order, variants: dict[str, str], item_id: str) -> str:
    variant = shop.variants[variants[item_id]]
    same = [i for i in order.items if variants[i.id] == variant.id]
    if len(same) != 1:
        raise Unspeakable(f"order {order.id} holds {len(same)} items of variant {variant.id}")
    return f"the {variant.product} ({variant.options})"


def _pay_phrase(shop: Store, order: Order, payment_id: str) -> str:
    if payment_id == order.payment_id:
        return "the original payment method"
    method = shop.payments[payment_id]
    if method.kind == "gift_card":
        return "my gift card"
    return f"my card ending in {method.last4}"


def _questions(facts: list[Fact], after_writes: bool) -> list[str]:
    asked = []
    for index, fact in enumerate(facts):
        if fact["kind"] == "customer_id":
            asked.append("What is my customer id")
        elif fact["kind"] == "status":
            asked.append(f"What is the status of my order {fact['order_id']}")
        elif fact["kind"] == "total":
            same = index and facts[index - 1].get("order_id") == fact["order_id"]
            order = fact["order_id"]
            asked.append("what is its total" if same else f"What is the total of my order {order}")
        elif fact["kind"] == "balance":
            later = " after all that" if after_writes else ""
            asked.append(f"What balance is left on my gift card{later}")
        else:
            asked.append("Which of my orders are still pending (their order ids)")
    return [" and ".join(asked) + "?"] if asked else []
