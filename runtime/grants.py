"""Grants ("Approve + allow similar"): what one covers, decided once for the loop and every store. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from signoff.runtime.records import GrantRecord


def granted_values(asked: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a grant made on approving `args` holds fixed: its rule's `same` names."""
    return {name: args.get(name) for name in (asked.get("grant") or {}).get("same", [])}


def grant_refusal(grant: GrantRecord, *, run_id: str, requester: str, tool: str, rule: str | None,
                  args: Mapping[str, Any], now: datetime | None) -> str | None:
    """Why `grant` does not let this call run unasked, or None if it does (`now` None: its time is
    checked later, by the store's clock)."""
    if grant.revoked_at is not None:
        return f"grant {grant.grant_id} was revoked by {grant.revoked_by}"
    if now is not None and grant.expires_at <= now:
        return f"grant {grant.grant_id} expired"
    if grant.tool != tool or grant.rule != rule:
        return f"grant {grant.grant_id} is for {grant.tool} under rule {grant.rule}"
    if (grant.run_id if grant.scope == "run" else grant.requester) != (run_id if grant.scope == "run" else requester):
        return f"grant {grant.grant_id} is for another {'run' if grant.scope == 'run' else 'requester'}"
    if any(args.get(name) != value for name, value in grant.same.items()):
        return f"grant {grant.grant_id} is for {', '.join(grant.same)} as approved"
    return None
