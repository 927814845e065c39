"""The approval's rules, each decided once in `runtime/approval.py`, tested without any store.

The stores only load, lock and save what these transitions return (the contract suite in
tests/store runs the same behaviour on memory, SQLite and PostgreSQL); here each rule is pinned
where it lives.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from signoff.runtime.approval import (
    ApprovalRequest,
    Change,
    Reopening,
    cancel_pending,
    close,
    decider_refusal,
    decision_refusal,
    dispatch,
    expire,
    nudge,
    opened,
    overdue,
    past_expiry,
    reopen,
    supersede_by_edit,
    use_grant,
    vote,
)
from signoff.runtime.approval_events import as_events
from signoff.runtime.people import SELF_APPROVAL
from signoff.runtime.records import (
    AlreadyCounted,
    AlreadyDecided,
    ApprovalRecord,
    CommandRefusal,
    Counted,
    Decided,
    Expired,
    NotDispatchable,
    Ungranted,
)

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=10)


def asking(quorum: int = 1, ttl: timedelta = timedelta(minutes=30), **asked: Any) -> ApprovalRecord:
    request = ApprovalRequest(step=3, tool="send_refund", args={"amount": 40, "order": "A-1"}, key="run-1:3",
                              digest="d1", ttl=ttl, quorum=quorum,
                              asked={"rule": "refunds", "quorum": quorum, "approvers": ["U1", "U2"], **asked})
    return opened(request, approval_id="apr_1", run_id="run-1", requester="U0", now=T0)


def test_an_opened_approval_is_pending_until_its_ttl_with_its_first_reminder_scheduled() -> None:
    approval = asking(remind=[0.5])
    assert (approval.status, approval.expires_at, approval.nudge_at) == (
        "pending", T0 + timedelta(minutes=30), T0 + timedelta(minutes=15))


def test_one_approve_decides_a_call_that_asks_one_person() -> None:
    voted, change = vote(asking(), user="U1", approved=True, now=T0 + timedelta(minutes=1), note="ok")
    assert isinstance(voted, Decided) and voted.approval.status == "approved"
    assert change is not None and change.vote is not None and change.vote.user == "U1"
    assert [e["type"] for e in as_events(change.events)] == ["approval_recorded"]
    assert change.changed.keys() == {"status", "decided_by", "decided_at", "note"}


def test_a_quorum_counts_distinct_people_and_each_person_once() -> None:
    first, change = vote(asking(quorum=2), user="U1", approved=True, now=T0)
    assert isinstance(first, Counted) and change is not None
    assert [e["type"] for e in as_events(change.events)] == ["approval_vote_recorded"]
    again, nothing = vote(first.approval, user="U1", approved=True, now=T0)
    assert isinstance(again, AlreadyCounted) and nothing is None
    second, _ = vote(first.approval, user="U2", approved=True, now=T0)
    assert isinstance(second, Decided) and second.approval.approved_by == ("U1", "U2")


def test_a_deny_vetoes_at_once_whatever_the_quorum() -> None:
    first, _ = vote(asking(quorum=3), user="U1", approved=True, now=T0)
    denied, change = vote(first.approval, user="U2", approved=False, now=T0, note="no")
    assert isinstance(denied, Decided) and denied.approval.status == "denied"
    assert change is not None and change.events[0].as_event()["approved"] is False


def test_a_click_after_the_expiry_expires_it_once_and_says_who_noticed() -> None:
    late = T0 + timedelta(minutes=31)
    voted, change = vote(asking(), user="U1", approved=True, now=late)
    assert isinstance(voted, Expired) and voted.just_now
    assert change is not None and change.events[0].as_event() == {"type": "approval_expired", "approval_id": "apr_1",
                                                       "key": "run-1:3", "tool": "send_refund", "rule": "refunds",
                                                       "waited_seconds": 1800.0, "noticed_by": "U1"}
    assert voted.written == change.events  # what the observer is told is what is written
    again, nothing = vote(voted.approval, user="U2", approved=True, now=late)
    assert isinstance(again, Expired) and not again.just_now and nothing is None


def test_a_decision_on_another_call_than_the_one_shown_counts_for_nothing() -> None:
    voted, change = vote(asking(), user="U1", approved=True, now=T0, digest="other")
    assert isinstance(voted, AlreadyDecided) and change is None


def test_an_approve_makes_the_grant_its_rule_offers_and_no_other() -> None:
    offered = asking(grant={"scope": "run", "for_seconds": 600, "same": ["order"]})
    voted, change = vote(offered, user="U1", approved=True, now=T0, grant_id="grt_1")
    assert isinstance(voted, Decided) and voted.grant is not None and change is not None
    assert (voted.grant.same, voted.grant.expires_at, voted.grant.created_by) == (
        {"order": "A-1"}, T0 + timedelta(minutes=10), "U1")
    assert [e["type"] for e in as_events(change.events)] == ["approval_recorded", "grant_created"]
    plain, _ = vote(asking(), user="U1", approved=True, now=T0, grant_id="grt_2")
    assert isinstance(plain, Decided) and plain.grant is None
    denied, _ = vote(offered, user="U1", approved=False, now=T0, grant_id="grt_3")
    assert isinstance(denied, Decided) and denied.grant is None


def test_the_expiry_sweep_takes_only_pending_approvals_past_their_time() -> None:
    approval = asking()
    assert not overdue(approval, T0 + timedelta(minutes=29))
    assert overdue(approval, T0 + timedelta(minutes=30))
    decided, _ = vote(approval, user="U1", approved=True, now=T0)
    assert not overdue(decided.approval, T0 + timedelta(hours=1))
    assert expire(approval, T0 + timedelta(minutes=30)).after.status == "expired"


def test_an_approved_call_starts_once_within_the_window_for_exactly_what_was_approved() -> None:
    decided, _ = vote(asking(), user="U1", approved=True, now=T0)
    used = dispatch(decided.approval, run_id="run-1", key="run-1:3", digest="d1", now=T0 + WINDOW / 2, window=WINDOW)
    assert isinstance(used, Change) and used.after.status == "consumed"
    again = dispatch(used.after, run_id="run-1", key="run-1:3", digest="d1", now=T0, window=WINDOW)
    assert isinstance(again, tuple) and again[0] == NotDispatchable("the approval for run-1:3 is consumed", "failed")
    changed = dispatch(decided.approval, run_id="run-1", key="run-1:3", digest="d2", now=T0, window=WINDOW)
    assert isinstance(changed, tuple) and changed[0].status == "failed" and changed[1] is None
    elsewhere = dispatch(decided.approval, run_id="run-2", key="run-1:3", digest="d1", now=T0, window=WINDOW)
    assert isinstance(elsewhere, tuple) and elsewhere[0].status == "failed"


def test_a_yes_not_acted_on_within_the_window_expires_and_is_audited() -> None:
    decided, _ = vote(asking(), user="U1", approved=True, now=T0)
    late = dispatch(decided.approval, run_id="run-1", key="run-1:3", digest="d1", now=T0 + WINDOW, window=WINDOW)
    assert isinstance(late, tuple)
    refusal, expired = late
    assert refusal.status == "expired" and expired is not None and expired.after.status == "expired"
    assert expired.events[0].as_event()["reason"] == "not started in time after the approval"


def test_a_sweep_after_a_restart_makes_only_what_is_still_due_and_each_once() -> None:
    approval = asking(remind=[0.25, 0.5], escalate={"after_seconds": 1200, "to": ["U3", "U1"]})
    assert nudge(approval, T0 + timedelta(minutes=5)) is None
    made = nudge(approval, T0 + timedelta(minutes=21))  # slept through both reminders and the escalation
    assert made is not None
    nudged, change = made
    assert (nudged.kinds, nudged.added, nudged.first_reminder) == (("escalate", "remind"), ("U3",), True)
    assert nudged.approval.asked is not None and nudged.approval.asked["approvers"] == ["U1", "U2", "U3"]
    assert [e["type"] for e in as_events(change.events)] == ["approval_escalated", "approval_reminded"]
    assert nudged.approval.nudge_at is None and nudge(nudged.approval, T0 + timedelta(minutes=29)) is None


def test_closing_leaves_a_used_approval_alone_and_cancel_only_a_pending_one() -> None:
    decided, _ = vote(asking(), user="U1", approved=True, now=T0)
    used = dispatch(decided.approval, run_id="run-1", key="run-1:3", digest="d1", now=T0, window=WINDOW)
    assert isinstance(used, Change)
    assert close(used.after, "cancelled", T0) is None
    closed = close(decided.approval, "superseded", T0)
    assert closed is not None and closed.after.status == "superseded"
    assert cancel_pending(decided.approval, T0, "U9") is None
    cancelled = cancel_pending(asking(), T0, "U9")
    assert cancelled is not None and (cancelled.after.status, cancelled.after.decided_by) == ("cancelled", "U9")


def test_an_edit_replaces_only_the_pending_approval_it_was_made_on() -> None:
    pending = asking()
    edited = supersede_by_edit(pending, run_id="run-1", digest="d1", by="U1", now=T0)
    assert isinstance(edited, Change) and edited.after.status == "superseded"
    decided, _ = vote(pending, user="U2", approved=True, now=T0)
    for approval, run_id, digest in ((decided.approval, "run-1", "d1"), (pending, "run-2", "d1"),
                                     (pending, "run-1", "d0"), (None, "run-1", "d1")):
        assert isinstance(supersede_by_edit(approval, run_id=run_id, digest=digest, by="U1", now=T0), CommandRefusal)


def test_the_policy_asking_more_reopens_only_an_approved_unused_approval() -> None:
    decided, _ = vote(asking(), user="U1", approved=True, now=T0)
    reopened = reopen(decided.approval, Reopening("run-1:3", 2, {"rule": "refunds", "quorum": 2}))
    assert reopened is not None and (reopened.after.status, reopened.after.quorum) == ("pending", 2)
    assert reopened.after.approved_by == ("U1",)  # the approve given still counts toward the new quorum
    assert reopen(asking(), Reopening("run-1:3", 2, {"quorum": 2})) is None


def test_who_may_decide_is_one_rule() -> None:
    def among(approvers: tuple[str, ...]) -> str | None:
        return None if "U1" in approvers else "not an approver"
    assert decider_refusal("U0", "U0", ("U0", "U1"), False, among) == SELF_APPROVAL
    assert decider_refusal("U1", "U0", ("U1",), False, among) is None
    assert decider_refusal("U2", "U0", ("U2",), True, among) == "not an approver"


def test_what_an_edge_may_open_is_what_the_store_would_take() -> None:
    approval = asking()
    assert decision_refusal(approval, "d1", T0) is None
    assert decision_refusal(approval, "d0", T0) == "changed"
    assert decision_refusal(approval, "d1", T0 + timedelta(minutes=30)) == "expired"
    decided, _ = vote(approval, user="U1", approved=True, now=T0)
    assert decision_refusal(decided.approval, "d1", T0) == "decided"


def test_a_grant_is_used_only_while_it_covers_the_call() -> None:
    offered = asking(grant={"scope": "run", "for_seconds": 600, "same": ["order"]})
    made, _ = vote(offered, user="U1", approved=True, now=T0, grant_id="grt_1")
    assert isinstance(made, Decided) and made.grant is not None
    grant = made.grant
    args = {"amount": 10, "order": "A-1"}
    used = use_grant(grant, "grt_1", run_id="run-1", requester="U0", tool="send_refund", args=args, now=T0)
    assert not isinstance(used, Ungranted) and used.uses == 1
    assert isinstance(use_grant(None, "grt_9", run_id="run-1", requester="U0", tool="send_refund", args=args,
                                now=T0), Ungranted)
    late = T0 + timedelta(minutes=10)
    assert isinstance(use_grant(grant, "grt_1", run_id="run-1", requester="U0", tool="send_refund", args=args,
                                now=late), Ungranted)
    revoked = dataclasses.replace(grant, revoked_at=T0, revoked_by="U1")
    assert isinstance(use_grant(revoked, "grt_1", run_id="run-1", requester="U0", tool="send_refund", args=args,
                                now=T0), Ungranted)
    other = {"amount": 10, "order": "B-2"}
    assert isinstance(use_grant(grant, "grt_1", run_id="run-1", requester="U0", tool="send_refund", args=other,
                                now=T0), Ungranted)


def test_expiry_is_one_rule_however_it_is_noticed() -> None:
    approval = asking()
    at_expiry = approval.expires_at
    assert past_expiry(approval, at_expiry) and not past_expiry(approval, at_expiry - timedelta(microseconds=1))
    assert overdue(approval, at_expiry) and decision_refusal(approval, "d1", at_expiry) == "expired"
    voted, _ = vote(approval, user="U1", approved=True, now=at_expiry)
    assert isinstance(voted, Expired) and voted.just_now
