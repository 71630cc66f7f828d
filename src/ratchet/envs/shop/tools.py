"""The shop's written policy and its tools: the read tools, then the write tools.

The policy is shown to the agent with every task; the tools enforce it (see ``world.py``,
``reads.py`` and ``writes.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ratchet.core.tool import ToolCall
from ratchet.envs.shop.reads import read_tools
from ratchet.envs.shop.world import World
from ratchet.envs.shop.writes import write_tools

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


def make_tools(world: World) -> list[Callable[..., Any]]:
    """Return the shop's tools bound to ``world``, in the order they are offered."""
    return [*read_tools(world), *write_tools(world)]


def replay(world: World, calls: list[ToolCall]) -> None:
    """Run tool calls on ``world`` (``finish`` is skipped), raising on the first failure.

    Raises:
        ToolError: If a call fails; gold plans never do, so this signals a bug.
    """
    tools = {fn.__name__: fn for fn in make_tools(world)}
    for call in calls:
        if call.name != "finish":
            tools[call.name](**call.arguments)
