"""Checking receipts against the execution ledger, offline: each receipt signed by a trusted key and
unchanged, and each call that started backed by a receipt that lets it run, for exactly the call the
ledger row says ran. Pure: `signoff audit verify --file` hands it an export's rows and the keys given.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from signoff.receipts import receipt_problem

LETS_RUN = ("approved", "allowed", "granted")
"""The decisions a call may start on."""


@dataclass(frozen=True)
class ReceiptRow:
    """A receipt as kept (`signoff.receipts`: the signed fields and the signature)."""

    receipt: dict[str, Any]

    @property
    def fields(self) -> dict[str, Any]:
        fields = self.receipt.get("receipt")
        return fields if isinstance(fields, dict) else {}

    @property
    def run_id(self) -> str | None:
        run_id = self.fields.get("run_id")
        return run_id if isinstance(run_id, str) else None


@dataclass(frozen=True)
class ExecutionRow:
    """A call the execution ledger says started: under `key`, `digest` binding its tool, arguments,
    key and preview; `approval_id`: the approval it used up (None: it ran unasked)."""

    run_id: str
    key: str
    tool: str
    digest: str
    status: str
    approval_id: str | None


@dataclass(frozen=True)
class StartedEvent:
    """A call's start as the hash-chained audit log records it (`execution_started`): a ledger row
    deleted with its receipt still shows by this."""

    run_id: str
    key: str
    tool: str
    approval_id: str | None


Proof = ReceiptRow | ExecutionRow


def started_event(run_id: str, type: str, payload: str) -> StartedEvent | None:
    """The call start an audit event records, if it is one (`execution_started`)."""
    if type != "execution_started":
        return None
    try:
        fields = json.loads(payload)
    except json.JSONDecodeError:
        return None
    if not isinstance(fields, dict) or not isinstance(fields.get("key"), str):
        return None
    approval_id = fields.get("approval_id")
    return StartedEvent(run_id, fields["key"], str(fields.get("tool")),
                        approval_id if isinstance(approval_id, str) else None)


def _named(fields: dict[str, Any]) -> str:
    if fields.get("approval_id"):
        return f"receipt of approval {fields['approval_id']}"
    return f"receipt of call {fields.get('key')}"


def receipt_problems(rows: Iterable[Proof], trusted: Iterable[Ed25519PublicKey],
                     started: Iterable[StartedEvent] = ()) -> list[str]:
    """Every problem with the receipts in `rows`, each naming the receipt (its approval, or the key of
    a call that ran unasked): one not signed by a `trusted` key or changed since, each call the
    ledger says started with no valid receipt letting it, or whose receipt is for another call, and
    each start the audit log records (`started`) whose ledger row and receipt are both gone."""
    keys = list(trusted)
    problems: list[str] = []
    valid: dict[str, list[dict[str, Any]]] = defaultdict(list)
    executions: list[ExecutionRow] = []
    for row in rows:
        if isinstance(row, ExecutionRow):
            executions.append(row)
            continue
        problem = receipt_problem(row.receipt, keys)
        if problem is not None:
            problems.append(f"{_named(row.fields)} (run {row.run_id}): {problem}")
        else:
            valid[str(row.fields.get("key"))].append(row.fields)
    for execution in executions:
        lets = [fields for fields in valid.get(execution.key, []) if fields.get("decision") in LETS_RUN]
        what = (f"approval {execution.approval_id}" if execution.approval_id else f"call {execution.key}")
        if not lets:
            problems.append(f"receipt of {what} (run {execution.run_id}) is missing: the ledger says "
                            f"{execution.tool} started under {execution.key} with no valid receipt letting it")
        elif not any(fields.get("digest") == execution.digest for fields in lets):
            problems.append(f"receipt of {what} (run {execution.run_id}) is for another call than the one "
                            f"the ledger says ran under {execution.key}")
    in_ledger = {execution.key for execution in executions}
    for event in started:
        lets = [fields for fields in valid.get(event.key, []) if fields.get("decision") in LETS_RUN
                and fields.get("tool") == event.tool]
        if event.key not in in_ledger and not lets:
            what = f"approval {event.approval_id}" if event.approval_id else f"call {event.key}"
            problems.append(f"receipt of {what} (run {event.run_id}) is missing: the audit log says {event.tool} "
                            f"started under {event.key}, and neither its ledger row nor its receipt is there")
    return problems
