"""How the shop spells its values: the shapes tools accept, amounts, order ids and addresses.

The argument types below put a pattern on each kind of id or code in the tools' JSON schemas;
the functions turn what an agent or a customer wrote into the one spelling the shop stores.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ratchet.core.tool import ToolError

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


def money(cents: int) -> str:
    """Format cents as dollars, e.g. ``1999 -> "$19.99"``."""
    return f"${cents / 100:.2f}"


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
