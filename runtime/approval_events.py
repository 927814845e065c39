"""The audit events an approval's transitions write, as a tagged union: one frozen type for each
kind, so that a transition cannot misspell a field, leave one out or give one of the wrong type,
and what the stores write and the observers hear is `as_event()` of it, the same JSON either way.
Pure.

Fields whose absence says something (no step-up, no break-glass, nobody noticed the expiry, an
approval that was never decided) are left out of the JSON rather than written as null, as the
events have always been written: a reader of an older event and of a newer one reads them alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from signoff.runtime.events import EventType, TypedEvent, optional


@dataclass(frozen=True, kw_only=True)
class _OfACall(TypedEvent):
    """What every event of an approval names, so that a reader of one event alone knows which call
    of which rule it is about."""

    approval_id: str
    key: str
    tool: str
    rule: str | None


@dataclass(frozen=True, kw_only=True)
class VoteRecorded(_OfACall):
    """One approve counted; the quorum needs more."""

    type: ClassVar[EventType] = "approval_vote_recorded"
    approved: bool
    by: str
    note: str
    approvals: int
    quorum: int
    step_up: Mapping[str, Any] | None = optional()
    break_glass: Mapping[str, Any] | None = optional()


@dataclass(frozen=True, kw_only=True)
class ApprovalRecorded(VoteRecorded):
    """The approval decided: approved (its quorum met, or the glass broken) or denied."""

    type: ClassVar[EventType] = "approval_recorded"
    waited_seconds: float


@dataclass(frozen=True, kw_only=True)
class ApprovalExpired(_OfACall):
    """Nobody decided in time (`waited_seconds`, and who noticed first if a click did), or a
    decision was not acted on in time (`approved_by`, `reason`)."""

    type: ClassVar[EventType] = "approval_expired"
    waited_seconds: float | None = optional()
    noticed_by: str | None = optional()
    approved_by: str | None = optional()
    reason: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class GrantCreated(TypedEvent):
    """An approve made the grant its rule offers ("Approve + allow similar")."""

    type: ClassVar[EventType] = "grant_created"
    grant_id: str
    approval_id: str
    by: str
    tool: str
    rule: str | None
    scope: str
    expires_at: str


@dataclass(frozen=True, kw_only=True)
class ApprovalReminded(TypedEvent):
    type: ClassVar[EventType] = "approval_reminded"
    approval_id: str
    key: str


@dataclass(frozen=True, kw_only=True)
class ApprovalEscalated(TypedEvent):
    type: ClassVar[EventType] = "approval_escalated"
    approval_id: str
    key: str
    added: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class GlassReviewed(TypedEvent):
    """The break-glass's review: confirmed or flagged, and whether it came after its deadline."""

    type: ClassVar[EventType] = "break_glass_reviewed"
    approval_id: str
    key: str
    verdict: str
    by: str
    note: str
    late: bool


@dataclass(frozen=True, kw_only=True)
class GlassFollowedUp(TypedEvent):
    """A break-glass's follow-up made: its channels told, its reviewers reminded, or it overdue."""

    type: ClassVar[EventType]
    approval_id: str
    key: str
    by: str
    review_by: str


@dataclass(frozen=True, kw_only=True)
class GlassTold(GlassFollowedUp):
    type: ClassVar[EventType] = "break_glass_told"


@dataclass(frozen=True, kw_only=True)
class GlassReviewReminded(GlassFollowedUp):
    type: ClassVar[EventType] = "break_glass_review_reminded"


@dataclass(frozen=True, kw_only=True)
class GlassReviewOverdue(GlassFollowedUp):
    type: ClassVar[EventType] = "break_glass_review_overdue"


ApprovalEvent = (VoteRecorded | ApprovalRecorded | ApprovalExpired | GrantCreated | ApprovalReminded
                 | ApprovalEscalated | GlassReviewed | GlassFollowedUp)
"""Every event a transition of an approval writes (a follow-up: one of `GlassFollowedUp`'s three kinds)."""


def as_events(events: tuple[ApprovalEvent, ...]) -> list[dict[str, Any]]:
    """`events` as the audit log keeps them, in order."""
    return [event.as_event() for event in events]
