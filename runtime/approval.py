"""One approval, and every rule about it, decided here once. Pure.

An approval is a request for people's decision on one exact call (its tool, arguments, key and
preview, bound by a digest). Whether it is open, who counts, a double vote, the quorum, a veto,
expiry at a click and by the sweep, reminders and escalation, the grant an approve makes, closing
it when its call changes or its run ends, and whether its call may still start: each is a
transition below. A transition takes the facts (who, when by the database's clock, the digest the
person saw) and returns the approval's next state with the audit events that say what happened
(`Change`), or why nothing did.

The stores load and lock an approval, hand it to a transition and save the `Change` whole; they
decide none of it, so a rule cannot be kept one way in SQL and another in memory. The runner and
the edges ask the same functions before they answer a person (`decision_refusal`,
`decider_refusal`), so what a button says and what the store does cannot disagree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from signoff.runtime.approval_change import Change, change_of
from signoff.runtime.approval_events import (
    ApprovalEscalated,
    ApprovalExpired,
    ApprovalRecorded,
    ApprovalReminded,
    GrantCreated,
    VoteRecorded,
)
from signoff.runtime.break_glass import broken_glass, glass_refusal
from signoff.runtime.durations import spoken
from signoff.runtime.grants import grant_refusal, granted_values
from signoff.runtime.notices import nudge_notices
from signoff.runtime.people import SELF_APPROVAL
from signoff.runtime.records import (
    AlreadyCounted,
    AlreadyDecided,
    ApprovalRecord,
    ApprovalStatus,
    CommandRefusal,
    Counted,
    Decided,
    Expired,
    GrantRecord,
    NotDispatchable,
    Nudged,
    Ungranted,
    Vote,
    Voted,
)

LIVE: frozenset[str] = frozenset({"pending", "approved", "consumed"})
"""The approvals still in force: at most one of them per key."""
OPEN: tuple[ApprovalStatus, ...] = ("pending", "approved")
"""Approvals not yet used: the ones a run's end or a changed tool closes."""
DECIDED: tuple[str, ...] = ("approved", "denied", "consumed", "expired", "cancelled")
"""What a run waiting on an approval can go on from: its worker has something to do."""
NOT_STARTED_IN_TIME = "not started in time after the approval"


# -- opening -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApprovalRequest:
    """The approval a step opens: for exactly this call, open for `ttl` from the store's now, and
    approved once `quorum` distinct allowed people approve it (`asked`: what the policy required)."""

    step: int
    tool: str
    args: dict[str, Any]
    key: str
    digest: str
    ttl: timedelta
    contract: str | None = None
    quorum: int = 1
    asked: dict[str, Any] | None = None
    asked_with: dict[str, Any] | None = None
    """What the run shows of the call as it asks (`ApprovalRecord.asked_with`)."""


@dataclass(frozen=True)
class Reopening:
    """An approved, unused approval the policy now asks more of: pending again until `quorum`."""

    key: str
    quorum: int
    asked: dict[str, Any]


def opened(request: ApprovalRequest, *, approval_id: str, run_id: str, requester: str,
           now: datetime) -> ApprovalRecord:
    """The approval `request` opens now, pending until `now + ttl`, its first nudge scheduled."""
    expires_at = now + request.ttl
    return ApprovalRecord(
        approval_id=approval_id, run_id=run_id, step=request.step, tool=request.tool, args=request.args,
        key=request.key, digest=request.digest, status="pending", requester=requester, requested_at=now,
        expires_at=expires_at, contract=request.contract, quorum=request.quorum, asked=request.asked,
        nudge_at=first_nudge(request.asked, now, expires_at), nudges=0, asked_with=request.asked_with)


def reopen(approval: ApprovalRecord, reopening: Reopening) -> Change | None:
    """An approved, unused approval pending again under a larger quorum (None: it is not approved)."""
    if approval.status != "approved":
        return None
    return change_of(approval, status="pending", quorum=reopening.quorum, asked=reopening.asked,
                   decided_at=None, decided_by=None)


# -- deciding ----------------------------------------------------------------------------------


def bound_to(approval: ApprovalRecord, digest: str | None) -> bool:
    """Whether `approval` is for the call `digest` binds (its tool, arguments, key and preview):
    a button, a form and a call's start all carry the digest of what the person was shown."""
    return approval.digest == digest


def is_open(approval: ApprovalRecord, now: datetime) -> bool:
    """Whether people may still decide `approval`: pending and, by the database's clock, unexpired."""
    return approval.status == "pending" and not past_expiry(approval, now)


def past_expiry(approval: ApprovalRecord, now: datetime) -> bool:
    """Whether `approval`'s time is up at `now` (the database's clock, never an edge's): the one
    rule of expiry, whoever notices it (a click, a form, the sweep)."""
    return approval.expires_at <= now


def vote(approval: ApprovalRecord, *, user: str, approved: bool, now: datetime, note: str = "",
         digest: str | None = None, grant_id: str | None = None,
         step_up: Mapping[str, Any] | None = None, glass: str | None = None) -> tuple[Voted, Change | None]:
    """Count `user`'s decision on `approval` (with `digest`: only on the call they were shown).

    A person counts once. A deny decides at once (a veto); an approve is counted until `quorum`
    distinct people have approved, and the one that completes it approves the call. `grant_id`:
    that approve also makes the grant the approval's rule offers, under this id. A click after the
    expiry, before any sweep noticed it, expires the approval (`Expired(just_now=True)`).
    `step_up`: the fresh sign-in this decision was made with (`SignIn.to_json`, checked by the
    runner: `step_up_refusal`), recorded in the event that counts it. `glass`: the reason `user`
    gave for breaking the glass: an approve that decides alone, whatever the quorum, where the
    rule offers it (`break_glass.glass_refusal`, asked here again; refused, nothing is counted).
    """
    if glass is not None and (not approved or glass_refusal(approval, glass) is not None):
        return AlreadyDecided(approval), None  # the runner refused it first, with its reason
    if is_open(approval, now) and (digest is None or bound_to(approval, digest)):
        broken = broken_glass(approval, user, glass, now) if glass is not None else None
        return _counted(approval, user=user, approved=approved, now=now, note=note, grant_id=grant_id,
                        step_up=step_up, glass=broken)
    if overdue(approval, now):
        change = expire(approval, now, noticed_by=user)
        return Expired(change.after, just_now=True, written=change.events), change
    if approval.status == "expired":
        return Expired(approval), None
    return AlreadyDecided(approval), None


def _counted(approval: ApprovalRecord, *, user: str, approved: bool, now: datetime, note: str,
             grant_id: str | None, step_up: Mapping[str, Any] | None,
             glass: dict[str, Any] | None) -> tuple[Voted, Change | None]:
    if has_voted(approval, user):
        return AlreadyCounted(approval), None
    given = Vote(user=user, approved=approved, at=now, note=note or None)
    approvals = sum(v.approved for v in approval.votes) + approved
    counted = VoteRecorded(**_named(approval), approved=approved, by=user, note=note or "", approvals=approvals,
                           quorum=approval.quorum, step_up=dict(step_up) if step_up is not None else None,
                           break_glass=glass)
    if approved and glass is None and approvals < approval.quorum:
        change = change_of(approval, counted, vote=given)  # its card owes a redraw showing the vote
        return Counted(change.after, written=change.events), change
    broke: dict[str, Any] = {"glass": glass, "glass_due_at": now} if glass is not None else {}
    recorded = ApprovalRecorded(**vars(counted), waited_seconds=_waited(approval.requested_at, now))
    decided = change_of(approval, recorded, vote=given, status="approved" if approved else "denied", decided_by=user,
                        decided_at=now, note=note or None, **broke)
    made = made_grant(decided.after, user, now, grant_id) if approved and grant_id is not None else None
    if made is not None:
        decided = dataclasses.replace(decided, grant=made, events=(*decided.events, GrantCreated(
            grant_id=made.grant_id, approval_id=approval.approval_id, by=user, tool=made.tool, rule=made.rule,
            scope=made.scope, expires_at=made.expires_at.isoformat())))
    return Decided(decided.after, made, written=decided.events), decided


def offers_grant(approval: ApprovalRecord) -> bool:
    """Whether the rule that asked for `approval` offers "Approve + allow similar"."""
    return bool((approval.asked or {}).get("grant"))


def made_grant(approval: ApprovalRecord, user: str, now: datetime, grant_id: str) -> GrantRecord | None:
    """The grant `user`'s approve of `approval` makes, as its rule offered it (None: it offers none)."""
    asked = approval.asked or {}
    offer = asked.get("grant")
    if not offer:
        return None
    return GrantRecord(grant_id=grant_id, approval_id=approval.approval_id, run_id=approval.run_id,
                       requester=approval.requester, tool=approval.tool, rule=asked.get("rule"),
                       same=granted_values(asked, approval.args), scope=offer["scope"], created_by=user,
                       created_at=now, expires_at=now + timedelta(seconds=offer["for_seconds"]))


Unopenable = Literal["changed", "decided", "expired"]
"""Why a decision cannot be taken: the call is not the one shown, someone decided it, it expired."""


def decision_refusal(approval: ApprovalRecord, digest: str, now: datetime) -> Unopenable | None:
    """Why a decision on `approval` from a button or form showing `digest` cannot be taken now,
    without changing anything: what an edge answers before it opens a form (`vote` decides)."""
    if not bound_to(approval, digest):
        return "changed"
    if approval.status != "pending":
        return "decided"
    if past_expiry(approval, now):
        return "expired"
    return None


# -- who may decide ----------------------------------------------------------------------------

IsAmong = Callable[[tuple[str, ...]], str | None]
"""(approvers) -> None if the person is one of them (user and group ids, `*`: the channel's
members; empty: the configured approvers), else the reason they are not. The edge answers it."""


def decider_refusal(user: str, requester: str, approvers: tuple[str, ...], allow_self_approval: bool,
                    is_among: IsAmong, *, self_refusal: str = SELF_APPROVAL) -> str | None:
    """Why `user` may not decide a call of `requester`'s run that asks `approvers`, or None: the
    one rule of who may approve, for a click, a grant's maker and a request alike."""
    if user == requester and not allow_self_approval:
        return self_refusal
    return is_among(approvers)


def has_voted(approval: ApprovalRecord, user: str) -> bool:
    """Whether `user`'s decision on `approval` is counted already: one person counts once."""
    return any(given.user == user for given in approval.votes)


def asked_of(approval: ApprovalRecord) -> tuple[tuple[str, ...], bool]:
    """The approvers `approval` was asked of, and whether its requester may approve it."""
    asked = approval.asked or {}
    return tuple(asked.get("approvers") or ()), bool(asked.get("allow_self_approval"))


def with_rule(reason: str | None, rule: str | None) -> str | None:
    """`reason` naming the policy rule it comes from, as every refusal to decide words it."""
    return f"{reason} (policy rule {rule})" if reason and rule else reason


# -- expiring, closing ---------------------------------------------------------------------------


def expire(approval: ApprovalRecord, now: datetime, *, noticed_by: str | None = None) -> Change:
    """`approval`, pending past its expiry, expired (`noticed_by`: the click that noticed it first)."""
    return change_of(approval, expiry_event(approval, noticed_by), status="expired", decided_at=now)


def expiry_event(approval: ApprovalRecord, noticed_by: str | None = None) -> ApprovalExpired:
    """The event of `approval`'s expiry: how long it waited is counted to its expiry, however late
    a sweep or a click noticed it."""
    return ApprovalExpired(**_named(approval), waited_seconds=_waited(approval.requested_at, approval.expires_at),
                           noticed_by=noticed_by)


def _named(approval: ApprovalRecord) -> dict[str, Any]:
    """The fields by which every event of an approval names its call (`approval_events._OfACall`)."""
    return {"approval_id": approval.approval_id, "key": approval.key, "tool": approval.tool, "rule": approval.rule}


def _waited(requested_at: datetime, until: datetime) -> float:
    """Seconds from a request to `until` (its decision or its expiry), by the store's clock."""
    return round(max((until - requested_at).total_seconds(), 0.0), 3)


def overdue(approval: ApprovalRecord, now: datetime) -> bool:
    """Whether the expiry sweep expires `approval` now."""
    return approval.status == "pending" and past_expiry(approval, now)


def close(approval: ApprovalRecord, status: ApprovalStatus, now: datetime, by: str | None = None) -> Change | None:
    """An approval not yet used closed as `status` (`superseded`: its call changed; `cancelled`: its
    run ended or the policy now refuses the call); None if it is used or closed already."""
    if approval.status not in OPEN:
        return None
    fields: dict[str, Any] = {"decided_by": by} if by is not None else {}
    return change_of(approval, status=status, decided_at=now, **fields)


def cancel_pending(approval: ApprovalRecord, now: datetime, by: str | None) -> Change | None:
    """A person's cancel of its run closes `approval` at once if it is pending, so a late click sees
    "cancelled", not a live button."""
    return close(approval, "cancelled", now, by) if approval.status == "pending" else None


def supersede_by_edit(approval: ApprovalRecord | None, *, run_id: str, digest: Any, by: str | None,
                      now: datetime) -> Change | CommandRefusal:
    """The approval an edit replaces, closed as superseded, or why the edit came too late: the
    approval must still be the run's, pending, for the call the editor saw."""
    if approval is None or approval.run_id != run_id or approval.status != "pending" or not bound_to(approval, digest):
        return CommandRefusal("the request was decided before your change arrived", stale=True)
    return change_of(approval, status="superseded", decided_at=now, decided_by=by)


# -- reminding and escalating ------------------------------------------------------------------

Nudge = tuple[datetime, str]
"""When, and whether to remind (`remind`) or to add the escalation's people (`escalate`)."""


def nudge_moments(asked: Mapping[str, Any] | None, requested_at: datetime, expires_at: datetime) -> list[Nudge]:
    """Every reminder and escalation of a pending approval, in order, before it expires."""
    if not asked:
        return []
    ttl = expires_at - requested_at
    moments = [(requested_at + ttl * fraction, "remind") for fraction in asked.get("remind") or []]
    escalate = asked.get("escalate")
    if escalate:
        moments.append((requested_at + timedelta(seconds=escalate["after_seconds"]), "escalate"))
    return sorted(moment for moment in moments if moment[0] < expires_at)


def first_nudge(asked: Mapping[str, Any] | None, requested_at: datetime, expires_at: datetime) -> datetime | None:
    moments = nudge_moments(asked, requested_at, expires_at)
    return moments[0][0] if moments else None


def nudge(approval: ApprovalRecord, now: datetime) -> tuple[Nudged, Change] | None:
    """What is due of `approval`'s reminders and escalation now (None: nothing): the kinds to make
    (a sweep after a restart that missed some makes only what is still worth saying, once), the
    escalation's people added to its approvers, and when the next is due."""
    if not is_open(approval, now) or approval.nudge_at is None or approval.nudge_at > now:
        return None
    moments = nudge_moments(approval.asked, approval.requested_at, approval.expires_at)
    done = approval.nudges
    kinds = sorted({kind for moment, kind in moments[done:] if moment <= now})
    after = done + sum(1 for moment, _ in moments[done:] if moment <= now)
    fields: dict[str, Any] = {"nudges": after, "nudge_at": moments[after][0] if after < len(moments) else None}
    added: tuple[str, ...] = ()
    if "escalate" in kinds and approval.asked is not None:
        approvers = list(approval.asked.get("approvers", []))
        added = tuple(i for i in approval.asked["escalate"]["to"] if i not in approvers)
        fields["asked"] = {**approval.asked, "approvers": [*approvers, *added], "escalated": True}
    events = [ApprovalEscalated(approval_id=approval.approval_id, key=approval.key, added=added) if kind == "escalate"
              else ApprovalReminded(approval_id=approval.approval_id, key=approval.key) for kind in kinds]
    reminded = [kind for _, kind in moments]
    first = "remind" in reminded[done:after] and "remind" not in reminded[:done]
    change = change_of(approval, *events, notices=nudge_notices(approval.approval_id, kinds, added, first), **fields)
    return Nudged(change.after, tuple(kinds), added, first, written=change.events), change


# -- starting the approved call ------------------------------------------------------------------


def dispatch(approval: ApprovalRecord | None, *, run_id: str, key: str, digest: str, now: datetime,
             window: timedelta) -> Change | tuple[NotDispatchable, Change | None]:
    """`approval` used up by its call starting now, or why the call must not start (with the
    change that refusal makes: an approval not acted on within `window` expires).

    A decision made before the approval expired holds, however busy the workers were; but only for
    `window` after it, so nobody's yes is acted on long after they gave it.
    """
    if approval is None or approval.run_id != run_id:
        return NotDispatchable(f"no approval recorded for {key}", "failed"), None
    if not bound_to(approval, digest):
        return NotDispatchable(f"the call no longer matches what was approved for {key}", "failed"), None
    if approval.status != "approved":
        return NotDispatchable(f"the approval for {key} is {approval.status}", "failed"), None
    if approval.decided_at is None or approval.decided_at <= now - window:
        expired = change_of(approval, ApprovalExpired(**_named(approval), approved_by=approval.decided_by,
                                                      reason=NOT_STARTED_IN_TIME), status="expired")
        return NotDispatchable(f"{key} was approved but could not start within {spoken(window.total_seconds())} "
                               "of the approval; it was not executed", "expired"), expired
    return change_of(approval, status="consumed", consumed_at=now)


def use_grant(grant: GrantRecord | None, grant_id: str, *, run_id: str, requester: str, tool: str,
              args: Mapping[str, Any], now: datetime) -> GrantRecord | Ungranted:
    """The grant with one more use, for a call starting now under it, or why it no longer covers
    the call (revoked or expired meanwhile, by the database's clock): checked in the transaction
    that starts the call, so a revoked grant stops the very next one."""
    if grant is None:
        return Ungranted(f"grant {grant_id} does not exist")
    refusal = grant_refusal(grant, run_id=run_id, requester=requester, tool=tool, rule=grant.rule, args=args, now=now)
    if refusal is not None:
        return Ungranted(refusal)
    return dataclasses.replace(grant, uses=grant.uses + 1, last_used_at=now)
