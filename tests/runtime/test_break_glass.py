"""Break-glass, the core's part: the rule's `break_glass` read from the policy file (with its errors),
an approve that decides alone with a long enough reason where the rule offers it and nowhere else,
its review (the first stands, never by the person who broke it), and its follow-ups, each once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from signoff.runtime.approval import ApprovalRequest, opened, vote
from signoff.runtime.approval_policy import BreakGlass, PolicyError, Requirement
from signoff.runtime.break_glass import (
    SELF_REVIEW,
    AlreadyReviewed,
    NotBroken,
    Reviewed,
    follow_up,
    glass_refusal,
    review,
    review_refusal,
)
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.records import AlreadyDecided, ApprovalRecord, Counted, Decided

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
OFFER = BreakGlass(reason_min_chars=20, review_within=timedelta(hours=24), notify=("C0SECURITY",))
REASON = "prod is down and the on-call lead is unreachable"


def asking(quorum: int = 2, offer: BreakGlass | None = OFFER) -> ApprovalRecord:
    asked: dict[str, Any] = {"rule": "refunds", "quorum": quorum, "approvers": ["U1", "U2"]}
    if offer is not None:
        asked["break_glass"] = offer.to_json()
    request = ApprovalRequest(step=3, tool="send_refund", args={"amount": 400}, key="run-1:3", digest="d1",
                              ttl=timedelta(minutes=30), quorum=quorum, asked=asked)
    return opened(request, approval_id="apr_1", run_id="run-1", requester="U0", now=T0)


def broken(at: datetime = T0) -> ApprovalRecord:
    voted, _ = vote(asking(), user="U1", approved=True, now=at, glass=REASON)
    assert isinstance(voted, Decided)
    return voted.approval


def rule(extra: str) -> str:
    return f"rules:\n  - {{name: refunds, tool: send_refund, approvers: [U0LEAD, U0OPS], quorum: 2, {extra}}}\n"


def test_a_rule_s_break_glass_is_kept_with_what_it_asks_and_defaults_what_it_leaves_out() -> None:
    policy = parse_policy(rule("break_glass: {notify: [C0SECURITY]}"), source="p.yaml")
    asked = policy.requirement(policy.rules[0]).to_json()
    assert asked["break_glass"] == {"reason_min_chars": 20, "review_within_seconds": 86400, "notify": ["C0SECURITY"]}
    assert Requirement.from_json(asked).break_glass == OFFER
    assert "break_glass" not in policy.defaults.to_json()


@pytest.mark.parametrize(("extra", "problem"), [
    ("break_glass: {notify: []}", "break_glass: notify is empty"),
    ("break_glass: {reason_min_chars: 0, notify: [C0SECURITY]}", "reason_min_chars must be a whole number"),
    ("break_glass: {review_within: 31d, notify: [C0SECURITY]}", "at most 30d"),
    ("break_glass: {notify: ['#security']}", "notify takes Slack channel ids"),
    ("break_glass: {notify: [C0SECURITY], who: anyone}", "unknown field 'who'"),
    ("break_glass: {notify: [C0SECURITY]}, step_up: 10m", "break_glass is never offered with step_up"),
])
def test_a_bad_break_glass_is_refused_naming_the_rule(extra: str, problem: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(rule(extra), source="p.yaml")
    assert str(refused.value).startswith("p.yaml: rule 'refunds': ") and problem in str(refused.value)


def test_breaking_the_glass_approves_alone_whatever_the_quorum_and_records_why() -> None:
    voted, change = vote(asking(quorum=2), user="U1", approved=True, now=T0, note="", glass=f"  {REASON}  ")
    assert isinstance(voted, Decided) and voted.approval.status == "approved"
    assert voted.approval.glass == {"by": "U1", "reason": REASON, "at": T0.isoformat(),
                                    "review_by": (T0 + timedelta(hours=24)).isoformat(), "notify": ["C0SECURITY"]}
    assert voted.approval.glass_due_at == T0, "its channels are told at once"
    assert change is not None and change.events[0].as_event()["break_glass"]["reason"] == REASON
    plain, _ = vote(asking(quorum=2), user="U1", approved=True, now=T0)
    assert isinstance(plain, Counted), "without the glass the quorum still holds"


@pytest.mark.parametrize(("approval", "reason", "refusal"), [
    (asking(offer=None), REASON, "this call's rule offers no break-glass"),
    (asking(), "because", "in at least 20 characters (you wrote 7)"),
    (asking(), " " * 30, "(you wrote 0)"),
])
def test_break_glass_is_refused_where_the_rule_offers_none_or_the_reason_is_short(
        approval: ApprovalRecord, reason: str, refusal: str) -> None:
    assert refusal in (glass_refusal(approval, reason) or "")
    voted, change = vote(approval, user="U1", approved=True, now=T0, glass=reason)
    assert isinstance(voted, AlreadyDecided) and change is None, "the store counts nothing the runner refused"


def test_a_deny_never_breaks_the_glass_and_a_decided_approval_cannot_be_broken_again() -> None:
    voted, change = vote(asking(), user="U1", approved=False, now=T0, glass=REASON)
    assert isinstance(voted, AlreadyDecided) and change is None
    again, change = vote(broken(), user="U2", approved=True, now=T0, glass=REASON)
    assert isinstance(again, AlreadyDecided) and change is None


def test_the_first_review_stands_and_the_one_who_broke_it_never_reviews_it() -> None:
    approval = broken()
    assert review_refusal(approval, "U1") == SELF_REVIEW and review_refusal(approval, "U2") is None
    done, change = review(approval, user="U2", verdict="flagged", note=" not an outage ", now=T0 + timedelta(hours=2))
    assert isinstance(done, Reviewed) and change is not None
    assert done.approval.glass_review == {"verdict": "flagged", "by": "U2", "at": (T0 + timedelta(hours=2)).isoformat(),
                                          "note": "not an outage"}
    assert done.approval.glass_due_at is None, "its follow-ups stop"
    assert change.events[0].as_event()["late"] is False
    again, change = review(done.approval, user="U3", verdict="confirmed", note="", now=T0 + timedelta(hours=3))
    assert isinstance(again, AlreadyReviewed) and change is None
    assert isinstance(review(asking(), user="U2", verdict="confirmed", note="", now=T0)[0], NotBroken)
    late, change = review(approval, user="U2", verdict="confirmed", note="", now=T0 + timedelta(hours=25))
    assert isinstance(late, Reviewed) and change is not None and change.events[0].as_event()["late"] is True


def test_follow_ups_tell_at_once_remind_half_way_and_say_overdue_each_once() -> None:
    approval, made = broken(), []
    for hours in (0, 1, 12, 13, 24, 30):
        due = follow_up(approval, T0 + timedelta(hours=hours))
        if due is not None:
            made.append((hours, due[0].kind, due[1].events[0].as_event()["type"]))
            approval = due[0].approval
    assert made == [(0, "tell", "break_glass_told"), (12, "remind", "break_glass_review_reminded"),
                    (24, "overdue", "break_glass_review_overdue")]
    assert approval.glass_due_at is None


def test_a_sweep_after_a_long_outage_makes_only_the_latest_follow_up() -> None:
    due = follow_up(broken(), T0 + timedelta(hours=30))
    assert due is not None and due[0].kind == "overdue" and due[0].approval.glass_due_at is None


def test_a_reviewed_break_glass_has_no_follow_ups() -> None:
    done, _ = review(broken(), user="U2", verdict="confirmed", note="", now=T0)
    assert isinstance(done, Reviewed) and follow_up(done.approval, T0 + timedelta(hours=30)) is None
