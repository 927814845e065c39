"""`issue_refund`: records a refund once per idempotency key in the outbox's refund ledger."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from signoff.tools.base import Tool, ToolFailed
from signoff.tools.demo.ledger import append_record, ledger_path, read_records, refunded_total
from signoff.tools.demo.lookup_orders import find_order
from signoff.tools.demo.outbox import args_digest, locked

CENT = Decimal("0.01")


class IssueRefundArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    order_id: str = Field(pattern=r"^[A-Za-z]-\d{4}$", description="The order to refund, e.g. A-1001.")
    amount_usd: Decimal = Field(
        gt=0, max_digits=9, decimal_places=2, description="Amount in US dollars, at most the refundable amount."
    )
    reason: str = Field(min_length=3, max_length=500, description="Why, in a sentence the customer could read.")

    @field_validator("order_id")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()

    @field_validator("amount_usd")
    @classmethod
    def _cents(cls, value: Decimal) -> Decimal:
        # 12.5 and 12.50 are the same refund and must hash to the same arguments digest.
        return value.quantize(CENT)


def record_refund(outbox: Path, args: dict[str, Any], key: str) -> dict[str, Any]:
    """Record the refund for `key` unless it is already recorded; either way return its record."""
    parsed = IssueRefundArgs.model_validate(args)
    digest = args_digest(parsed.model_dump(mode="json"))
    # The check and the append happen under one exclusive lock, so two processes racing
    # with the same key record it once.
    with locked(ledger_path(outbox)) as ledger:
        records = read_records(ledger)
        earlier = next((r for r in records if r["key"] == key), None)
        if earlier is not None:
            if earlier["digest"] != digest:
                raise ToolFailed(
                    f"key {key!r} already recorded refund {earlier['refund_id']} with other arguments; "
                    "nothing was refunded"
                )
            return _result(earlier)
        record = _new_record(parsed, records, key, digest)
        append_record(ledger, record)
    return _result(record)


def _new_record(parsed: IssueRefundArgs, records: list[dict[str, Any]], key: str, digest: str) -> dict[str, Any]:
    order = find_order(parsed.order_id)
    if order is None:
        raise ToolFailed(f"unknown order {parsed.order_id!r}; nothing was refunded")
    already = Decimal(order["refunded_usd"]) + refunded_total(records, order["order_id"])
    refundable = Decimal(order["total_usd"]) - already
    if parsed.amount_usd > refundable:
        raise ToolFailed(
            f"refused: ${parsed.amount_usd} is more than the ${refundable:.2f} still refundable on "
            f"{order['order_id']} (total ${order['total_usd']}); nothing was refunded"
        )
    return {
        "key": key,
        "digest": digest,
        "refund_id": "rf_" + hashlib.sha256(key.encode()).hexdigest()[:16],
        "order_id": order["order_id"],
        "customer_email": order["customer_email"],
        "amount_usd": f"{parsed.amount_usd:.2f}",
        "reason": parsed.reason,
        "refundable_usd_after": f"{refundable - parsed.amount_usd:.2f}",
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def preview_refund(outbox: Path, args: dict[str, Any], key: str) -> dict[str, Any]:
    """What the refund would do now: the order's refundable amount as the ledger has it this moment,
    and what would be left (read-only). Taken again just before the refund starts, so a refund
    approved against a balance that has moved since is asked about again, not refused."""
    parsed = IssueRefundArgs.model_validate(args)
    order = find_order(parsed.order_id)
    if order is None:
        return {"order_id": parsed.order_id, "refund_usd": f"{parsed.amount_usd:.2f}", "order": "unknown"}
    with locked(ledger_path(outbox)) as ledger:
        already = Decimal(order["refunded_usd"]) + refunded_total(read_records(ledger), order["order_id"])
    refundable = Decimal(order["total_usd"]) - already
    return {"order_id": order["order_id"], "customer_email": order["customer_email"],
            "refund_usd": f"{parsed.amount_usd:.2f}", "refundable_usd_now": f"{refundable:.2f}",
            "refundable_usd_after": f"{refundable - parsed.amount_usd:.2f}",
            **({"would_be_refused": "more than is still refundable"} if parsed.amount_usd > refundable else {})}


def _result(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in sorted(record) if k != "digest"}


def issue_refund_tool(outbox: Path) -> Tool:
    """The side-effecting `issue_refund` tool, recording into `outbox/refunds.jsonl`."""
    return Tool(
        name="issue_refund",
        fn=partial(record_refund, outbox),
        preview=partial(preview_refund, outbox),
        preview_must_match=True,
        side_effect=True,
        idempotent=True,
        args_model=IssueRefundArgs,
        description=(
            "Refund money to a customer's original payment method for one order. Moves money: check "
            "the order id, the amount (never more than still refundable) and the reason."
        ),
        timeout_s=10.0,
    )
