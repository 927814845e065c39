"""Reviews of standing access: the grants ("allow similar") and API keys in force, put to people
on a schedule, each line kept or revoked once. Who may answer a line, and when a line can no
longer be answered, are decided here, once. Pure: no I/O, no Slack, no SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from signoff.runtime.api_keys import ApiKey
from signoff.runtime.records import GrantRecord

Verdict = Literal["keep", "revoke"]
VERDICTS: tuple[Verdict, ...] = ("keep", "revoke")
SubjectKind = Literal["grant", "key"]
NudgeKind = Literal["remind", "escalate"]

RunEvent = tuple[str, dict[str, Any]]
"""An audit event and the run whose log it goes in (a grant's: the run it was made in)."""

NOT_A_KEY_REVIEWER = "only the configured approvers (SIGNOFF_APPROVERS) review API keys"
GRANT_RUN_GONE = "the run this grant was made in no longer exists, so only its maker may act on it"
KEEP_OWN_GRANT = "you made this grant, so someone else who may approve its calls has to keep it"


@dataclass(frozen=True)
class ReviewLine:
    """One grant or key a review asks about, and what became of it."""

    kind: SubjectKind
    subject: str
    """The grant's id, or the key's name."""
    verdict: Verdict | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None


@dataclass(frozen=True)
class AccessReview:
    """One period's review, as stored."""

    review_id: str
    period: datetime
    """The start of the period it reviews, by the database's clock: one review a period."""
    opened_at: datetime
    lines: tuple[ReviewLine, ...]
    channel: str | None = None
    ts: str | None = None
    posted_at: datetime | None = None
    reminded_at: datetime | None = None
    escalated_at: datetime | None = None

    def line(self, kind: SubjectKind, subject: str) -> ReviewLine | None:
        return next((line for line in self.lines if (line.kind, line.subject) == (kind, subject)), None)

    @property
    def unanswered(self) -> tuple[ReviewLine, ...]:
        return tuple(line for line in self.lines if line.verdict is None)


@dataclass(frozen=True)
class Standing:
    """What a review's lines are about, as they are now (absent: deleted since)."""

    grants: dict[str, GrantRecord]
    keys: dict[str, ApiKey]


@dataclass(frozen=True)
class Reviewed:
    """The line was answered by this click: kept, or revoked at once."""

    review: AccessReview
    line: ReviewLine


def review_subjects(grants: Sequence[GrantRecord], keys: Sequence[ApiKey],
                    now: datetime) -> list[tuple[SubjectKind, str]]:
    """What a review opened at `now` asks about: every grant and every key in force, oldest grant first."""
    live_grants = sorted((g for g in grants if g.revoked_at is None and g.expires_at > now),
                         key=lambda g: g.created_at)
    return [*(("grant", g.grant_id) for g in live_grants), *(("key", k.name) for k in keys if k.live)]


def grant_reviewer_refusal(verdict: Verdict, user: str, grant: GrantRecord,
                           approver_refusal: Callable[[], str | None]) -> str | None:
    """Why `user` may not keep or revoke `grant` (in a review, or from App Home), or None: those
    who may decide the approval it was made on (by its rule then and now; `approver_refusal` says
    why not) keep or revoke it; its maker may always revoke it, but keeping it is for someone else."""
    if user == grant.created_by:
        return KEEP_OWN_GRANT if verdict == "keep" else None
    return approver_refusal()


def key_reviewer_refusal(user: str, key: ApiKey, approver_refusal: str | None) -> str | None:
    """Why `user` may not answer a key's line, or None: only the configured approvers may
    (`approver_refusal` is why they are not one), and not for a key that speaks for them."""
    if key.requester == user:
        return "this key asks for approvals as you, so someone else has to review it"
    return f"{NOT_A_KEY_REVIEWER}: {approver_refusal}" if approver_refusal else None


def stale_reason(review: AccessReview, latest_review_id: str | None, kind: SubjectKind, subject: str,
                 standing: Standing, now: datetime) -> str | None:
    """Why a line of `review` can no longer be answered, or None: a newer review replaced it, or
    what it asks about is no longer in force."""
    if latest_review_id != review.review_id:
        return "a newer review of standing access replaced this one; answer that one"
    if kind == "grant":
        grant = standing.grants.get(subject)
        if grant is None:
            return f"grant {subject} no longer exists"
        if grant.revoked_at is not None:
            return f"grant {subject} was already revoked by {grant.revoked_by}"
        if grant.expires_at <= now:
            return f"grant {subject} has expired"
        return None
    key = standing.keys.get(subject)
    if key is None:
        return f"key {subject} no longer exists"
    return f"key {subject} was already revoked" if not key.live else None


def due_nudge(review: AccessReview, now: datetime, remind_after_s: float) -> NudgeKind | None:
    """The nudge an unanswered review is due: a reminder once `remind_after_s` has passed since it
    was posted, an escalation once twice that has; None when it is answered or nothing is due."""
    if review.posted_at is None or not review.unanswered:
        return None
    waited = (now - review.posted_at).total_seconds()
    if review.escalated_at is None and waited >= 2 * remind_after_s:
        return "escalate"
    if review.reminded_at is None and review.escalated_at is None and waited >= remind_after_s:
        return "remind"
    return None


class AccessReviews(Protocol):
    """Where reviews are kept; times are the store's (the database's clock)."""

    def now(self) -> datetime:
        """The database's time now."""

    def has_review(self, period: datetime) -> bool:
        """Whether `period`'s review was opened (by any replica)."""

    def open_review(self, period: datetime, lines: Sequence[tuple[SubjectKind, str]], posting_for_s: float,
                    audit: Callable[[str], Sequence[RunEvent]]) -> AccessReview | None:
        """Open the review of `period` with `lines`, held for posting by the caller for
        `posting_for_s`, and write `audit(review_id)` in the same transaction; None when that
        period's review exists (another replica opened it)."""

    def take_unposted(self, posting_for_s: float) -> list[AccessReview]:
        """Reviews opened but not posted whose poster's hold lapsed (it crashed), held now for the caller."""

    def posted(self, review_id: str, channel: str, ts: str) -> AccessReview | None:
        """Record where the review was posted."""

    def get_review(self, review_id: str) -> AccessReview | None:
        """One review with its lines; None if there is none."""

    def latest_review_id(self) -> str | None:
        """The review of the latest period; None before the first."""

    def answer(self, review_id: str, kind: SubjectKind, subject: str, verdict: Verdict, user: str,
               audit: Sequence[RunEvent] = ()) -> bool:
        """Set the line's verdict if it has none (a revoke also overrides a keep: access taken
        away stays away), with `audit` in the same transaction; True if this call set it."""

    def take_nudge(self, review_id: str, kind: NudgeKind) -> bool:
        """Mark the review reminded or escalated, once; True if this call did."""
