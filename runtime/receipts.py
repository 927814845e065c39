"""What a decision's receipt says, and signing it. Pure: the key is loaded at the edge and handed in.

A store makes the receipt in the transaction that records the decision (a person's approve or
deny, or a call the policy or a grant let start unasked), so one never exists without the other.
The format and the checking are `signoff.receipts`', shared with the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.canonical import arguments_digest
from signoff.receipts import sign
from signoff.runtime.audit import stamp
from signoff.runtime.records import ApprovalRecord

SigningKey = Ed25519PrivateKey
"""The key receipts are signed with (`SIGNOFF_SIGNING_KEY`); never stored in the database."""

Unasked = Literal["allowed", "granted"]
"""A call that started without a person deciding it: a policy rule allowed it, or a grant covered it."""


def decision_receipt(approval: ApprovalRecord, key: SigningKey, *, start_within: timedelta,
                     step_up: Mapping[str, Any] | None = None, grant_id: str | None = None) -> dict[str, Any]:
    """The signed receipt of `approval` just decided (approved or denied) by its votes, by the
    database's clock; an approved call may start until `start_within` after the decision.
    `step_up`: the fresh sign-in the deciding vote was made with (None: none was); `grant_id`: the
    grant the approve made ("Approve + allow similar"), whose later uses have receipts of their own."""
    assert approval.status in ("approved", "denied") and approval.decided_at is not None, approval.status
    asked = approval.asked or {}
    preview = (approval.asked_with or {}).get("preview") or {}
    approved = approval.status == "approved"
    return sign({
        "approval_id": approval.approval_id, "run_id": approval.run_id, "requester": approval.requester,
        "key": approval.key, "tool": approval.tool, "digest": approval.digest,
        "arguments_digest": arguments_digest(approval.tool, approval.args),
        "preview_digest": preview.get("digest") if isinstance(preview, Mapping) else None,
        "policy_digest": asked.get("policy"), "rule": asked.get("rule"), "grant_id": grant_id,
        "decision": approval.status,
        "decided_by": [{"user": vote.user, "approved": vote.approved, "at": stamp(vote.at)} for vote in approval.votes],
        "decided_at": stamp(approval.decided_at),
        "start_by": stamp(approval.decided_at + start_within) if approved else None,
        "step_up": _step_up(step_up),
        "break_glass": _break_glass(approval.glass),
    }, key)


def start_receipt(decision: Unasked, key: SigningKey, *, run_id: str, requester: str, tool: str,
                  args: Mapping[str, Any], call_key: str, digest: str, now: datetime, rule: str | None = None,
                  grant_id: str | None = None, preview: str | None = None, policy: str | None = None) -> dict[str, Any]:
    """The signed receipt of a call starting `now` without a person deciding it: `rule` allowed it,
    or the grant `grant_id` covered it."""
    return sign({
        "approval_id": None, "run_id": run_id, "requester": requester, "key": call_key, "tool": tool,
        "digest": digest, "arguments_digest": arguments_digest(tool, dict(args)), "preview_digest": preview,
        "policy_digest": policy, "rule": rule, "grant_id": grant_id, "decision": decision, "decided_by": [],
        "decided_at": stamp(now), "start_by": stamp(now), "step_up": _step_up(None), "break_glass": None,
    }, key)


def _step_up(step_up: Mapping[str, Any] | None) -> dict[str, Any]:
    if step_up is None:
        return {"stepped_up": False, "signed_in_at": None}
    return {"stepped_up": True, "signed_in_at": step_up.get("signed_in_at"), "issuer": step_up.get("issuer")}


def _break_glass(glass: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Who approved alone by breaking the glass, why, and by when it is to be reviewed (None: it was not)."""
    if glass is None:
        return None
    return {"by": glass.get("by"), "reason": glass.get("reason"), "review_by": glass.get("review_by")}
