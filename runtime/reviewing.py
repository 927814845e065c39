"""The reviews of standing access, run: opening a period's review once, posting it, answering its
lines (a revoke takes effect in the database at once, so on every replica), and nudging the
people of one left unanswered. Knows the stores only by their Protocols.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from signoff.runtime.access_reviews import (
    AccessReview,
    AccessReviews,
    NudgeKind,
    Reviewed,
    RunEvent,
    Standing,
    SubjectKind,
    Verdict,
    due_nudge,
    key_reviewer_refusal,
    review_subjects,
    stale_reason,
)
from signoff.runtime.api_keys import ApiKeys
from signoff.runtime.events import grant_kept, grant_put_to_review
from signoff.runtime.records import AlreadyDone, Missing, NotAllowed, Refused, RunRecord
from signoff.runtime.runner import Runner

ReviewOutcome = Reviewed | AlreadyDone | NotAllowed | Refused | Missing
GRANTS_REVIEWED = 500
"""The most grants one review lists (the newest stay off it until the next: a card has room for so many)."""


class ReviewNotifier(Protocol):
    """Shows reviews to people (Slack). Failures are logged, never fatal."""

    def review_opened(self, review: AccessReview, standing: Standing) -> dict[str, Any] | None:
        """Post the review with Keep and Revoke on each line; return where ({"channel", "ts"})."""

    def review_updated(self, review: AccessReview, standing: Standing) -> None:
        """Show the review's answers so far in its message."""

    def review_nudged(self, review: AccessReview, kind: NudgeKind) -> None:
        """Remind the reviewers (`remind`), or tell the whole channel (`escalate`), that lines wait."""


@dataclass(frozen=True)
class ReviewConfig:
    channel: str
    """Where reviews are posted: the approval channel."""
    remind_after: timedelta = timedelta(days=1)
    """An unanswered review reminds its reviewers after this, and escalates after twice this."""
    posting_for: timedelta = timedelta(seconds=60)
    """How long a replica that opened a review has to post it before another posts it instead."""


class AccessReviewer:
    """Opens, posts, answers and nudges reviews of standing access."""

    def __init__(self, runner: Runner, reviews: AccessReviews, keys: ApiKeys, notifier: ReviewNotifier,
                 config: ReviewConfig) -> None:
        self.runner, self.reviews, self.api_keys, self.notifier, self.config = runner, reviews, keys, notifier, config

    def open_due(self, period: datetime) -> AccessReview | None:
        """Open and post `period`'s review unless it exists (opened here or by another replica);
        then post any review whose poster crashed before posting it."""
        posted = self._open(period) if not self.reviews.has_review(period) else None
        for review in self.reviews.take_unposted(self.config.posting_for.total_seconds()):
            self._post(review)
        return posted

    def _open(self, period: datetime) -> AccessReview | None:
        store = self.runner.store
        grants = store.list_grants(live=True, limit=GRANTS_REVIEWED)
        lines = review_subjects(grants, self.api_keys.keys(), self.reviews.now())
        by_id = {g.grant_id: g for g in grants}

        def audit(review_id: str) -> list[RunEvent]:
            return [(by_id[subject].run_id, grant_put_to_review(subject, review_id, period.isoformat()))
                    for kind, subject in lines if kind == "grant"]

        # Nothing in force, nothing to ask: the period stays open for a grant or key made later in it.
        opened = self.reviews.open_review(period, lines, self.config.posting_for.total_seconds(),
                                          audit) if lines else None
        return self._post(opened) if opened is not None else None

    def _post(self, review: AccessReview) -> AccessReview | None:
        where = self.notifier.review_opened(review, self.standing(review))
        if not where:
            return None  # Slack said no: the hold lapses and the next tick posts it again
        return self.reviews.posted(review.review_id, where["channel"], where["ts"])

    def standing(self, review: AccessReview) -> Standing:
        """What `review`'s lines are about, as they are now."""
        grants = {line.subject: grant for line in review.lines
                  if line.kind == "grant" and (grant := self.runner.store.get_grant(line.subject)) is not None}
        kept = self.api_keys.keys()
        keys = {key.name: key for key in kept}
        return Standing(grants=grants, keys={line.subject: keys[line.subject] for line in review.lines
                                             if line.kind == "key" and line.subject in keys})

    def answer(self, review_id: str, kind: SubjectKind, subject: str, verdict: Verdict, user: str) -> ReviewOutcome:
        """`user` keeps or revokes one line of a review: once, if they may, unless it is stale."""
        review = self.reviews.get_review(review_id)
        line = review.line(kind, subject) if review is not None else None
        if review is None or line is None:
            return Missing("review")
        if line.verdict is not None and (line.verdict == "revoke" or verdict == "keep"):
            return AlreadyDone(line.verdict, line.decided_by, line.decided_at)
        standing = self.standing(review)
        refusal = self._refusal(verdict, user, kind, subject, standing, review)
        if refusal:
            return NotAllowed(refusal)
        stale = stale_reason(review, self.reviews.latest_review_id(), kind, subject, standing, self.reviews.now())
        if stale:
            return Refused(stale)
        if verdict == "revoke":
            self._revoke(kind, subject, user)  # first: a crash after it leaves access revoked, never kept
        audit: list[RunEvent] = []
        if verdict == "keep" and kind == "grant":
            audit.append((standing.grants[subject].run_id, grant_kept(subject, review_id, user)))
        if not self.reviews.answer(review_id, kind, subject, verdict, user, audit):
            again = self.reviews.get_review(review_id)
            won = again.line(kind, subject) if again is not None else None
            return AlreadyDone(verdict, won.decided_by if won else None, won.decided_at if won else None)
        answered = self.reviews.get_review(review_id)
        assert answered is not None
        self.notifier.review_updated(answered, self.standing(answered))
        decided = answered.line(kind, subject)
        assert decided is not None
        return Reviewed(answered, decided)

    def _refusal(self, verdict: Verdict, user: str, kind: SubjectKind, subject: str, standing: Standing,
                 review: AccessReview) -> str | None:
        if kind == "grant":
            grant = standing.grants.get(subject)
            if grant is None:
                return None  # nothing to act on: said as stale
            return self.runner.grant_refusal(verdict, user, grant)
        key = standing.keys.get(subject)
        if key is None:
            return None
        return key_reviewer_refusal(user, key, self.runner.may_approve(user, _review_context(review), ()))

    def _revoke(self, kind: SubjectKind, subject: str, user: str) -> None:
        if kind == "grant":
            self.runner.store.revoke_grant(subject, user)
        else:
            self.api_keys.revoke_key(subject)

    def nudge_due(self) -> list[tuple[AccessReview, NudgeKind]]:
        """Remind, then escalate, the latest review while lines of it are unanswered (a superseded
        one is not: its lines are asked again in the newer); each nudge once, whichever replica is first."""
        latest = self.reviews.latest_review_id()
        review = self.reviews.get_review(latest) if latest is not None else None
        if review is None:
            return []
        kind = due_nudge(review, self.reviews.now(), self.config.remind_after.total_seconds())
        if kind is None or not self.reviews.take_nudge(review.review_id, kind):
            return []
        self.notifier.review_nudged(review, kind)
        return [(review, kind)]


def _review_context(review: AccessReview) -> RunRecord:
    """A review's place as the approver check sees it: no run, its channel (whose members `*` names)."""
    at = review.opened_at
    return RunRecord(run_id=review.review_id, goal="", requester="", origin={"channel": review.channel},
                     model="", status="done", state={}, version=0, created_at=at, updated_at=at)
