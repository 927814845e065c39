"""Grants ("Approve + allow similar"): what one covers, decided once for the loop and every store. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from signoff.runtime.durations import spoken
from signoff.runtime.pending_calls import GrantOffer
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


def grant_unfit(grant: GrantRecord, offered: GrantOffer | None, *, run_id: str,
                granter_refusal: str | None = None) -> str | None:
    """Why `grant`, which covers a call, may not let it run under the policy in force, or None if it
    may: a grant is used only while the rule that matches the call still offers one at least as
    wide (no longer, no more runs, no argument free that the rule now holds fixed) and its maker may
    still approve that call (`granter_refusal`: why they may not, by the rule as it is now)."""
    if offered is None:
        return f"grant {grant.grant_id}: rule {grant.rule} no longer offers a grant"
    newly_fixed = [name for name in offered.same if name not in grant.same]
    if newly_fixed:
        return (f"grant {grant.grant_id}: rule {grant.rule} now holds {', '.join(newly_fixed)} to the approved "
                f"value{'s' if len(newly_fixed) > 1 else ''}, which this grant left free")
    if offered.scope == "run" and grant.scope != "run" and grant.run_id != run_id:
        return f"grant {grant.grant_id}: rule {grant.rule} now grants within one run only"
    if grant.expires_at - grant.created_at > timedelta(seconds=offered.for_seconds):
        return f"grant {grant.grant_id}: rule {grant.rule} now grants for {spoken(offered.for_seconds)} at most"
    if granter_refusal:
        return f"grant {grant.grant_id}: {grant.created_by} may no longer approve this call ({granter_refusal})"
    return None
