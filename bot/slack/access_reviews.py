"""Reviews of standing access in Slack: posting and updating a review's message, nudging its
reviewers, and the Keep and Revoke buttons (ack first, parse, one reviewer call, tell the clicker)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, assert_never

from slack_bolt import Ack
from slack_sdk.errors import SlackApiError

from signoff.bot.slack.access_review_cards import (
    REVIEW_ACTIONS,
    answer_text,
    nudge_message,
    parse_line_value,
    review_message,
)
from signoff.bot.slack.blocks import user
from signoff.bot.slack.notices import Notices
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.payloads import Malformed, Where, where_of
from signoff.bot.slack.replies import already_text, not_done_text
from signoff.bot.words import people
from signoff.runtime.access_reviews import AccessReview, NudgeKind, Reviewed, Standing, SubjectKind, Verdict
from signoff.runtime.people import CHANNEL_MEMBERS
from signoff.runtime.records import AlreadyDone, Missing, NotAllowed, Refused
from signoff.runtime.reviewing import AccessReviewer, ReviewConfig, ReviewOutcome

log = logging.getLogger("signoff.bot.slack.access_reviews")


class SlackReviews:
    """`reviewing.ReviewNotifier` over Slack: the review's message in the approval channel."""

    def __init__(self, notifier: SlackNotifier, config: ReviewConfig, reviewers: frozenset[str]) -> None:
        self.notifier, self.config, self.reviewers = notifier, config, reviewers

    def review_opened(self, review: AccessReview, standing: Standing) -> dict[str, Any] | None:
        message = review_message(review, standing, self.notifier.display)
        try:
            posted = self.notifier.client.chat_postMessage(channel=self.config.channel, **message.as_kwargs())
        except SlackApiError as exc:
            log.warning("could not post review %s: %s", review.review_id, exc.response.get("error"))
            return None
        return {"channel": str(posted["channel"]), "ts": str(posted["ts"])}

    def review_updated(self, review: AccessReview, standing: Standing) -> None:
        if review.channel and review.ts:
            try:
                self.notifier.client.chat_update(channel=review.channel, ts=review.ts,
                                                 **review_message(review, standing, self.notifier.display).as_kwargs())
            except SlackApiError as exc:  # the answer is stored; the next answer shows it
                log.warning("could not update review %s: %s", review.review_id, exc.response.get("error"))

    def review_nudged(self, review: AccessReview, kind: NudgeKind) -> None:
        if not (review.channel and review.ts):
            return
        message = nudge_message(review, kind, self._reviewer_mentions())
        try:
            self.notifier.client.chat_postMessage(channel=review.channel, thread_ts=review.ts,
                                                  reply_broadcast=kind == "escalate", **message.as_kwargs())
        except SlackApiError as exc:
            log.warning("could not nudge review %s: %s", review.review_id, exc.response.get("error"))

    def _reviewer_mentions(self) -> str:
        named = [user(r) if r != CHANNEL_MEMBERS else "everyone here" for r in sorted(self.reviewers)]
        return people(named) or "approvers"


class ReviewButtons:
    """Keep and Revoke on a review's lines."""

    def __init__(self, reviewer: AccessReviewer, notices: Notices) -> None:
        self.reviewer, self.notices = reviewer, notices

    def on_press(self, ack: Ack, body: dict[str, Any]) -> Callable[[], None] | None:
        ack()
        click = parse_review_click(body)
        if isinstance(click, Malformed):
            self.notices.refuse_malformed(body, click)
            return None
        return lambda: self._answer(*click)

    def _answer(self, where: Where, review_id: str, kind: SubjectKind, subject: str, verdict: Verdict) -> None:
        outcome = self.reviewer.answer(review_id, kind, subject, verdict, where.user)
        self.notices.tell(where, answered_text(outcome, verdict, kind))


def parse_review_click(body: Any) -> tuple[Where, str, SubjectKind, str, Verdict] | Malformed:
    """A Keep or Revoke click: who, where, and the line it answers."""
    if not isinstance(body, dict) or body.get("type") != "block_actions":
        return Malformed("not a button click")
    acted = body.get("actions")
    if not isinstance(acted, list) or len(acted) != 1 or not isinstance(acted[0], dict):
        return Malformed("expected exactly one action")
    verdict = REVIEW_ACTIONS.get(str(acted[0].get("action_id")))
    value = acted[0].get("value")
    line = parse_line_value(value) if isinstance(value, str) and len(value) <= 300 else None
    if verdict is None or line is None:
        return Malformed("the button carries no usable value")
    where = where_of(body)
    if isinstance(where, Malformed):
        return where
    return where, *line, verdict


def answered_text(outcome: ReviewOutcome, verdict: Verdict, kind: SubjectKind) -> str:
    """What the person who pressed Keep or Revoke is told."""
    match outcome:
        case Reviewed():
            return answer_text(verdict, kind)
        case AlreadyDone(what=what, by=by, at=at):
            return already_text(what, by, at)
        case NotAllowed(reason=reason) | Refused(reason=reason):
            return not_done_text(reason)
        case Missing():
            return "This review no longer exists."
        case _:
            assert_never(outcome)
