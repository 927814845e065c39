"""The rules of a review of standing access, as data in and data out: who may answer a line,
when a line is stale, when a review reminds; and the period a moment is in, by the schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from signoff.bot.review_schedule import review_period, review_trigger
from signoff.runtime.access_reviews import (
    AccessReview,
    ReviewLine,
    Standing,
    due_nudge,
    grant_reviewer_refusal,
    key_reviewer_refusal,
    review_subjects,
    stale_reason,
)
from signoff.runtime.api_keys import ApiKey
from signoff.runtime.records import GrantRecord

NOW = datetime(2026, 12, 3, 7, 5, tzinfo=UTC)  # a Thursday


def grant(grant_id: str = "grt_a", **changes) -> GrantRecord:
    values = dict(grant_id=grant_id, approval_id="apr_1", run_id="run-1", requester="U0ASKER", tool="refund",
                  rule="refunds", same={"order_id": "42"}, scope="requester", created_by="U0LEAD",
                  created_at=NOW - timedelta(days=1), expires_at=NOW + timedelta(days=1))
    return GrantRecord(**{**values, **changes})


def key(name: str = "ci-bot", **changes) -> ApiKey:
    return ApiKey(**{**dict(name=name, channel="C0API", tools=("*",), requester=None,
                            created_at=NOW - timedelta(days=3)), **changes})


def review(review_id: str = "rev_1", **changes) -> AccessReview:
    values = dict(review_id=review_id, period=NOW, opened_at=NOW, posted_at=NOW,
                  lines=(ReviewLine("grant", "grt_a"), ReviewLine("key", "ci-bot")))
    return AccessReview(**{**values, **changes})


def test_a_review_asks_about_what_is_in_force_only():
    grants = [grant("grt_new", created_at=NOW - timedelta(hours=1)), grant("grt_old"),
              grant("grt_gone", revoked_at=NOW, revoked_by="U0OPS"), grant("grt_over", expires_at=NOW)]
    keys = [key("ci-bot"), key("old-bot", revoked_at=NOW)]
    assert review_subjects(grants, keys, NOW) == [("grant", "grt_old"), ("grant", "grt_new"), ("key", "ci-bot")]


def test_who_may_keep_or_revoke():
    assert grant_reviewer_refusal("keep", "U0OPS", grant(), lambda: None) is None
    assert grant_reviewer_refusal("keep", "U0OPS", grant(), lambda: "not an approver") == "not an approver"
    assert grant_reviewer_refusal("revoke", "U0LEAD", grant(), lambda: "not an approver") is None  # its maker
    assert grant_reviewer_refusal("keep", "U0LEAD", grant(), lambda: None).startswith("you made this grant")
    assert key_reviewer_refusal("U0ADMIN", key(), None) is None
    assert key_reviewer_refusal("U0ADMIN", key(requester="U0ADMIN"), None).startswith("this key asks for approvals as you")
    assert key_reviewer_refusal("U0X", key(), "not one").startswith("only the configured approvers")


def test_a_line_is_stale_once_replaced_revoked_or_ended():
    standing = Standing(grants={"grt_a": grant()}, keys={"ci-bot": key()})
    assert stale_reason(review(), "rev_1", "grant", "grt_a", standing, NOW) is None
    assert stale_reason(review(), "rev_2", "key", "ci-bot", standing, NOW).startswith("a newer review")
    ended = Standing(grants={"grt_a": grant(expires_at=NOW)}, keys={"ci-bot": key(revoked_at=NOW)})
    assert stale_reason(review(), "rev_1", "grant", "grt_a", ended, NOW) == "grant grt_a has expired"
    assert stale_reason(review(), "rev_1", "key", "ci-bot", ended, NOW) == "key ci-bot was already revoked"
    assert stale_reason(review(), "rev_1", "grant", "grt_a", Standing({}, {}), NOW) == "grant grt_a no longer exists"


def test_an_unanswered_review_reminds_then_escalates_and_an_answered_one_neither():
    day = 86_400
    assert due_nudge(review(), NOW + timedelta(hours=23), day) is None
    assert due_nudge(review(), NOW + timedelta(hours=25), day) == "remind"
    assert due_nudge(review(reminded_at=NOW), NOW + timedelta(hours=25), day) is None
    assert due_nudge(review(reminded_at=NOW), NOW + timedelta(hours=49), day) == "escalate"
    assert due_nudge(review(), NOW + timedelta(hours=49), day) == "escalate"  # a replica down all along: once
    answered = (ReviewLine("grant", "grt_a", "keep", "U0OPS", NOW),)
    assert due_nudge(review(lines=answered), NOW + timedelta(hours=49), day) is None
    assert due_nudge(review(posted_at=None), NOW + timedelta(hours=49), day) is None


@pytest.mark.parametrize(("schedule", "period"), [
    ("0 9 * * 1", datetime(2026, 11, 30, 9, tzinfo=UTC)),  # cron's 1 is Monday
    ("0 9 * * 0", datetime(2026, 11, 29, 9, tzinfo=UTC)),  # and 0 (or 7) Sunday
    ("0 9 * * 7", datetime(2026, 11, 29, 9, tzinfo=UTC)),
    ("0 9 * * 1-5", datetime(2026, 12, 2, 9, tzinfo=UTC)),
    ("0 9 * * */2", datetime(2026, 12, 1, 9, tzinfo=UTC)),
    ("0 9 * * thu", datetime(2026, 11, 26, 9, tzinfo=UTC)),
    ("* * * * *", datetime(2026, 12, 3, 7, 5, tzinfo=UTC)),
    ("0 0 1 1 *", datetime(2026, 1, 1, tzinfo=UTC)),
])
def test_the_period_is_the_schedule_s_latest_time_at_or_before_now(schedule, period):
    trigger = review_trigger(schedule)
    assert trigger is not None and review_period(trigger, NOW) == period


@pytest.mark.parametrize("schedule", ["0 9 * *", "0 9 * * 6-1", "61 * * * *", "0 9 * * mon extra"])
def test_a_schedule_that_is_not_five_cron_fields_is_refused(schedule):
    with pytest.raises(ValueError):
        review_trigger(schedule)
    assert review_trigger("off") is None and review_trigger("") is None
