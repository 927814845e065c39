"""`lookup_orders`: read-only lookup over the built-in order data, by customer email or order id."""

from __future__ import annotations

import json
from decimal import Decimal
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from signoff.tools.base import Tool
from signoff.tools.demo.ledger import refunded_per_order


class LookupOrdersArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    customer_email: str | None = Field(None, max_length=254, description="The customer's email address.")
    order_id: str | None = Field(None, max_length=32, description="An order id such as A-1001.")

    @field_validator("customer_email", "order_id")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @model_validator(mode="after")
    def _one_given(self) -> LookupOrdersArgs:
        if self.customer_email is None and self.order_id is None:
            raise ValueError("give customer_email or order_id")
        return self


@cache
def orders() -> tuple[dict[str, Any], ...]:
    """The built-in orders; money fields are decimal strings such as "42.00"."""
    text = resources.files(__package__).joinpath("orders.json").read_text(encoding="utf-8")
    return tuple(json.loads(text))


def find_order(order_id: str) -> dict[str, Any] | None:
    """The order with this id (case-insensitive), or None."""
    wanted = order_id.strip().upper()
    return next((o for o in orders() if o["order_id"] == wanted), None)


def matching_orders(
    customer_email: str | None, order_id: str | None, ledger: dict[str, Decimal]
) -> list[dict[str, Any]]:
    """Orders matching every filter given, counting the refunds recorded in `ledger`."""
    found = []
    for order in orders():
        if customer_email is not None and order["customer_email"] != customer_email.lower():
            continue
        if order_id is not None and order["order_id"] != order_id.upper():
            continue
        refunded = Decimal(order["refunded_usd"]) + ledger.get(order["order_id"], Decimal("0"))
        refundable = Decimal(order["total_usd"]) - refunded
        found.append({**order, "refunded_usd": f"{refunded:.2f}", "refundable_usd": f"{refundable:.2f}"})
    return found


def lookup_orders_tool(outbox: Path) -> Tool:
    """The read-only `lookup_orders` tool; amounts include refunds recorded in `outbox`."""

    def lookup_orders(args: dict[str, Any], key: str) -> dict[str, Any]:
        parsed = LookupOrdersArgs.model_validate(args)
        return {"orders": matching_orders(parsed.customer_email, parsed.order_id, refunded_per_order(outbox))}

    return Tool(
        name="lookup_orders",
        fn=lookup_orders,
        args_model=LookupOrdersArgs,
        description=(
            "Look up orders by customer email or order id: items, total, status, how much has been "
            "refunded and how much is still refundable. Read-only."
        ),
        timeout_s=5.0,
    )
