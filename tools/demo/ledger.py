"""The refund ledger: one JSON line per recorded refund, in `refunds.jsonl` in the outbox."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from signoff.tools.base import ToolFailed
from signoff.tools.demo.outbox import locked

LEDGER_NAME = "refunds.jsonl"


def ledger_path(outbox: Path) -> Path:
    """Where the refund ledger lives."""
    return outbox / LEDGER_NAME


def read_records(ledger: IO[str]) -> list[dict[str, Any]]:
    """Every complete record in `ledger`, which must be held under an exclusive lock.

    A crash in the middle of an append leaves a last line without its newline: that refund
    was never recorded, so the torn tail is cut off before anything else is appended.
    """
    ledger.seek(0)
    text = ledger.read()
    complete = text[: text.rfind("\n") + 1]
    if len(complete) < len(text):
        ledger.truncate(len(complete.encode()))
    return _parse(complete)


def append_record(ledger: IO[str], record: dict[str, Any]) -> None:
    """Append `record` as one line and make it durable before returning."""
    # ASCII-only lines keep character and byte offsets equal for `read_records`.
    ledger.write(json.dumps(record, sort_keys=True, ensure_ascii=True) + "\n")
    ledger.flush()
    os.fsync(ledger.fileno())


def refunded_total(records: list[dict[str, Any]], order_id: str) -> Decimal:
    """The sum of the recorded refunds on `order_id`."""
    return sum((Decimal(r["amount_usd"]) for r in records if r["order_id"] == order_id), Decimal("0"))


def refunded_per_order(outbox: Path) -> dict[str, Decimal]:
    """Recorded refunds summed per order, read under a shared lock; empty if there is no ledger."""
    path = ledger_path(outbox)
    if not path.exists():
        return {}
    with locked(path, shared=True) as ledger:
        text = ledger.read()
    records = _parse(text[: text.rfind("\n") + 1])
    return {order_id: refunded_total(records, order_id) for order_id in {r["order_id"] for r in records}}


def forget_refunds(outbox: Path) -> None:
    """Empty the refund ledger in `outbox`, so every order is as refundable as the built-in data says.

    Truncated under the exclusive lock rather than deleted, so a process appending at the same
    moment writes into the ledger that is read next, not into a file no one will open again.
    """
    path = ledger_path(outbox)
    if path.exists():
        with locked(path) as ledger:
            ledger.truncate(0)


def _parse(text: str) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise ToolFailed(f"the refund ledger is corrupt at line {number}; nothing was recorded") from None
    return records
