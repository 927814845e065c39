"""Break-glass, decided here once. Pure.

A rule may offer it (`break_glass:` in the policy): then one person, the run's requester or one of
the rule's approvers, may approve a call alone, typing why, and it runs at once. That is loud by
design and owed a review: the channels the rule names are told with the reason, a review card asks
the rule's approvers to confirm or flag it before `review_within`, they are reminded half way and
told again, with the channels, once it is overdue. Every step here is a transition of the approval
(`Change`), so a replica that saves one saves its audit event with it, and a sweep on any replica
makes each follow-up once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from signoff.runtime.approval_change import Change, change_of
from signoff.runtime.approval_events import (
    ApprovalEvent,
    GlassFollowedUp,
    GlassReviewed,
    GlassReviewOverdue,
    GlassReviewReminded,
    GlassTold,
)
from signoff.runtime.approval_policy import BreakGlass
from signoff.runtime.notices import FollowUpGlass, ShowGlassReview
from signoff.runtime.records import ApprovalRecord

Verdict = Literal["confirmed", "flagged"]
FollowUp = Literal["tell", "remind", "overdue"]
FOLLOW_UPS: tuple[FollowUp, ...] = ("tell", "remind", "overdue")
"""A break-glass's follow-ups in order: tell its channels and post the review card (at once),
remind the reviewers (half way to `review_by`), and say it is overdue (at `review_by`)."""
FOLLOW_UP_EVENTS: dict[FollowUp, type[GlassFollowedUp]] = {
    "tell": GlassTold, "remind": GlassReviewReminded, "overdue": GlassReviewOverdue}
SELF_REVIEW = "you broke the glass, so someone else reviews it"


def offer_of(asked: Mapping[str, Any] | None) -> BreakGlass | None:
    """The break-glass the rule that asked for an approval offers (None: none, or unreadable)."""
    stored = (asked or {}).get("break_glass")
    try:
        return BreakGlass.from_json(stored) if stored is not None else None
    except ValueError:
        return None


def glass_refusal(approval: ApprovalRecord, reason: str | None) -> str | None:
    """Why `approval` cannot be approved by breaking the glass with `reason` (None: it can): its
    rule must offer it, and the reason must be as long as the rule asks (None: not typed yet, as
    its form opens). Who may is the runner's (`GlassRequests.breaker_refusal`); whether it is
    still open is the vote's."""
    offer = offer_of(approval.asked)
    if offer is None:
        return "this call's rule offers no break-glass: it needs its approvers"
    written = len(reason.strip()) if reason is not None else offer.reason_min_chars
    if written < offer.reason_min_chars:
        return (f"say why the glass must be broken in at least {offer.reason_min_chars} characters "
                f"(you wrote {written})")
    return None


def broken_glass(approval: ApprovalRecord, user: str, reason: str, now: datetime) -> dict[str, Any]:
    """What breaking the glass records with the approval (and in its `approval_recorded` event)."""
    offer = offer_of(approval.asked)
    assert offer is not None, "glass_refusal is asked first"
    return {"by": user, "reason": reason.strip(), "at": now.isoformat(),
            "review_by": (now + offer.review_within).isoformat(), "notify": list(offer.notify)}


def review_by(approval: ApprovalRecord) -> datetime | None:
    """When the break-glass of `approval` is to be reviewed by (None: it broke no glass)."""
    glass = approval.glass or {}
    return datetime.fromisoformat(glass["review_by"]) if "review_by" in glass else None


def unreviewed(approval: ApprovalRecord) -> bool:
    return approval.glass is not None and approval.glass_review is None


# -- reviewing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reviewed:
    """The review was recorded: `approval.glass_review` says how."""

    approval: ApprovalRecord
    written: tuple[ApprovalEvent, ...] = field(default=(), compare=False, repr=False)
    """The audit events its transaction wrote, as written (what the observer hears)."""


@dataclass(frozen=True)
class AlreadyReviewed:
    """Someone reviewed it first (`approval.glass_review`)."""

    approval: ApprovalRecord


@dataclass(frozen=True)
class NotBroken:
    """The approval was not approved by breaking the glass: there is nothing to review."""

    approval: ApprovalRecord


ReviewOutcome = Reviewed | AlreadyReviewed | NotBroken


def review(approval: ApprovalRecord, *, user: str, verdict: Verdict, note: str, now: datetime,
           ) -> tuple[ReviewOutcome, Change | None]:
    """`user`'s review of the break-glass that approved `approval`: the first one stands (a second
    click, a replay or another reviewer's late one changes nothing), and its follow-ups stop."""
    if approval.glass is None:
        return NotBroken(approval), None
    if approval.glass_review is not None:
        return AlreadyReviewed(approval), None
    given = {"verdict": verdict, "by": user, "at": now.isoformat(), "note": note.strip() or None}
    late = (at := review_by(approval)) is not None and now > at
    change = change_of(approval, GlassReviewed(approval_id=approval.approval_id, key=approval.key, verdict=verdict,
                                               by=user, note=note.strip(), late=late),
                       glass_review=given, glass_due_at=None,
                       notices=(ShowGlassReview(approval_id=approval.approval_id),))
    return Reviewed(change.after, written=change.events), change


def review_refusal(approval: ApprovalRecord, user: str) -> str | None:
    """Why `user` may not review `approval`'s break-glass for a reason of its own (who decides the
    rule's calls is the runner's): the person who broke it does not review it."""
    return SELF_REVIEW if (approval.glass or {}).get("by") == user else None


# -- following up --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GlassDue:
    """A follow-up of a break-glass just made (`kind`), to be carried out by the edge."""

    approval: ApprovalRecord
    kind: FollowUp
    written: tuple[ApprovalEvent, ...] = field(default=(), compare=False, repr=False)
    """The audit events its transaction wrote, as written (what the observer hears)."""


def follow_up(approval: ApprovalRecord, now: datetime) -> tuple[GlassDue, Change] | None:
    """The break-glass's follow-up due now (None: none): the next in `FOLLOW_UPS`, once, and when
    the one after it is due. A sweep after a long outage makes only the latest still worth making."""
    if not unreviewed(approval) or approval.glass_due_at is None or approval.glass_due_at > now:
        return None
    deadline = review_by(approval)
    assert approval.glass is not None and deadline is not None
    broken_at = datetime.fromisoformat(approval.glass["at"])
    moments = [broken_at, broken_at + (deadline - broken_at) / 2, deadline]
    done = approval.glass_nudges
    reached = max((i for i in range(done, len(moments)) if moments[i] <= now), default=done)
    kind = FOLLOW_UPS[reached]
    after = reached + 1
    event = FOLLOW_UP_EVENTS[kind](approval_id=approval.approval_id, key=approval.key, by=approval.glass["by"],
                                   review_by=approval.glass["review_by"])
    change = change_of(approval, event, glass_nudges=after,
                       glass_due_at=moments[after] if after < len(moments) else None,
                       notices=(FollowUpGlass(approval_id=approval.approval_id, follow_up=kind),))
    return GlassDue(change.after, kind, written=change.events), change
