"""The reviews of standing access as stored, on SQLite and PostgreSQL: one review a period, a
review whose poster died posted by another, a line answered once (a revoke overriding a keep, never
the reverse), and each nudge once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from signoff.runtime.adapters.access_reviews import SqlAccessReviews
from signoff.runtime.adapters.sql import SqlStore

LINES = [("grant", "grt_a"), ("key", "ci-bot")]


@pytest.fixture
def reviews(sql_store: SqlStore, clock) -> SqlAccessReviews:
    return SqlAccessReviews(sql_store.engine, clock=clock)


def test_a_period_is_opened_once_and_a_review_left_unposted_is_taken_after_its_hold(reviews, clock):
    period = clock().replace(second=0) - timedelta(minutes=5)
    opened = reviews.open_review(period, LINES, 60, lambda review_id: [])
    assert opened is not None and [(line.kind, line.subject) for line in opened.lines] == LINES
    assert reviews.open_review(period, LINES, 60, lambda review_id: []) is None
    assert reviews.latest_review_id() == opened.review_id

    assert reviews.take_unposted(60) == []  # its opener still holds it
    clock.advance(seconds=61)  # ... and died without posting it
    [taken] = reviews.take_unposted(60)
    assert taken.review_id == opened.review_id and reviews.take_unposted(60) == []
    posted = reviews.posted(opened.review_id, "C0REVIEWS", "1.2")
    assert posted is not None and (posted.channel, posted.ts, posted.posted_at) == ("C0REVIEWS", "1.2", clock())
    clock.advance(seconds=120)
    assert reviews.take_unposted(60) == []

    later = reviews.open_review(period + timedelta(days=7), LINES, 60, lambda review_id: [])
    assert later is not None and reviews.latest_review_id() == later.review_id


def test_a_line_is_answered_once_and_a_revoke_overrides_a_keep_but_not_the_reverse(reviews):
    review = reviews.open_review(reviews.now(), LINES, 60, lambda review_id: [])
    assert review is not None
    assert reviews.answer(review.review_id, "grant", "grt_a", "keep", "U0OPS")
    assert not reviews.answer(review.review_id, "grant", "grt_a", "keep", "U0LEAD")
    assert reviews.answer(review.review_id, "grant", "grt_a", "revoke", "U0LEAD")
    assert not reviews.answer(review.review_id, "grant", "grt_a", "keep", "U0OPS")
    assert not reviews.answer(review.review_id, "grant", "grt_a", "revoke", "U0OPS")
    assert not reviews.answer(review.review_id, "key", "no-such-key", "revoke", "U0OPS")
    answered = reviews.get_review(review.review_id)
    assert answered is not None
    line = answered.line("grant", "grt_a")
    assert line is not None and (line.verdict, line.decided_by) == ("revoke", "U0LEAD")
    assert [line.subject for line in answered.unanswered] == ["ci-bot"]


def test_each_nudge_is_taken_once(reviews):
    review = reviews.open_review(reviews.now(), LINES, 60, lambda review_id: [])
    assert review is not None
    assert reviews.take_nudge(review.review_id, "remind") and not reviews.take_nudge(review.review_id, "remind")
    assert reviews.take_nudge(review.review_id, "escalate") and not reviews.take_nudge(review.review_id, "escalate")
