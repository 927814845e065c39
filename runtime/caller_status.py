"""What a caller is told of the call it asked about: one status from the run, its approval and its
ledger row, decided here once for every door a caller uses (the HTTP API, its clients). Pure.

pending -> approved -> started -> succeeded | failed; or denied (by a person, a rule, or the run
cancelled) or expired (nobody decided in time, or the caller did not start it in time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from signoff.runtime.records import ApprovalRecord, RunRecord

CallerStatus = Literal["pending", "approved", "denied", "expired", "started", "succeeded", "failed"]
DECIDED: frozenset[str] = frozenset({"approved", "denied", "expired", "started", "succeeded", "failed"})
"""Statuses a waiting caller stops waiting at: everything but `pending`."""


@dataclass(frozen=True)
class CallerView:
    status: CallerStatus
    args: dict[str, Any]
    """The arguments that run, or would: as approved (an approver may have edited them)."""
    decided_by: str | None = None
    """Who or what decided: a person's Slack id, `policy:<rule>`, or `grant:<id>`."""
    reason: str | None = None


def caller_view(run: RunRecord, approvals: Sequence[ApprovalRecord], execution: Mapping[str, Any] | None,
                asked_args: dict[str, Any]) -> CallerView:
    """The caller's view of its run: `approvals` of its call, newest first; `execution` its ledger
    row; `asked_args` the arguments it asked with (the call's until a person edits them)."""
    pending = run.state.get("pending") or {}
    handed = pending.get("handed") or {}
    approval = next((a for a in approvals if a.status != "superseded"), None)
    args = dict(pending.get("args") or (approval.args if approval is not None else asked_args))
    person = approval.decided_by if approval is not None else None
    decided_by = (f"policy:{handed['allowed_by']}" if handed.get("allowed_by")
                  else f"grant:{handed['granted_by']}" if handed.get("granted_by") else person)
    if execution is not None:
        status = {"started": "started", "succeeded": "succeeded"}.get(execution["status"], "failed")
        return CallerView(status, dict(execution.get("args") or args), decided_by,  # type: ignore[arg-type]
                          execution.get("error"))
    match run.status:
        case "idle" | "running" | "awaiting_approval":
            return CallerView("pending", args)
        case "awaiting_caller":
            return CallerView("approved", args, decided_by)
        case "needs_reconciliation":
            return CallerView("started", args, decided_by, "no outcome was reported in time; a person is asked")
    return _ended(run, approval, args)


def _ended(run: RunRecord, approval: ApprovalRecord | None, args: dict[str, Any]) -> CallerView:
    """A run that ended, or stopped, without its call starting."""
    if approval is not None and approval.status in ("expired", "denied"):
        return CallerView(approval.status, args, approval.decided_by, approval.note or _told(run))
    if run.status == "expired":
        return CallerView("expired", args, None, "nobody decided in time")
    return CallerView("denied", args, None, _told(run))


def _told(run: RunRecord) -> str | None:
    """Why the call was not made, as the run recorded it (the rule's reason, the cancellation)."""
    told = [entry for entry in run.state.get("history", []) if entry.get("role") == "tool" and "error" in entry]
    if told:
        return str(told[-1]["error"])
    stop = run.state.get("stop") or {}
    return str(stop["reason"]) if stop.get("reason") else None
