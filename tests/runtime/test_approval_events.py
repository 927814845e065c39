"""An approval's events as types: each writes the JSON the audit log has always kept for its kind,
with the fields whose absence says something left out rather than written as null."""

from __future__ import annotations

import typing

from signoff.runtime.approval_events import (
    ApprovalEscalated,
    ApprovalEvent,
    ApprovalExpired,
    GlassFollowedUp,
    VoteRecorded,
)
from signoff.runtime.events import EVENT_TYPES

CALL = {"approval_id": "apr_1", "key": "run-1:3", "tool": "send_refund", "rule": None}


def test_a_vote_without_a_step_up_or_a_broken_glass_writes_neither() -> None:
    plain = VoteRecorded(**CALL, approved=True, by="U1", note="", approvals=1, quorum=2)
    assert plain.as_event() == {"type": "approval_vote_recorded", **CALL, "approved": True, "by": "U1", "note": "",
                                "approvals": 1, "quorum": 2}
    stepped = VoteRecorded(**CALL, approved=True, by="U1", note="", approvals=1, quorum=2, step_up={"at": "t"})
    assert stepped.as_event()["step_up"] == {"at": "t"} and "break_glass" not in stepped.as_event()
    assert plain.as_event()["rule"] is None  # the rule is named, even when no rule asked (the built-in policy)


def test_an_expiry_says_only_what_it_knows() -> None:
    swept = ApprovalExpired(**CALL, waited_seconds=1800.0)
    assert set(swept.as_event()) == {"type", *CALL, "waited_seconds"}
    late = ApprovalExpired(**CALL, approved_by="U1", reason="not started in time after the approval")
    assert set(late.as_event()) == {"type", *CALL, "approved_by", "reason"}


def test_an_escalation_lists_who_it_added() -> None:
    event = ApprovalEscalated(approval_id="apr_1", key="run-1:3", added=("U2", "S0OPS"))
    assert event.as_event() == {"type": "approval_escalated", "approval_id": "apr_1", "key": "run-1:3",
                                "added": ["U2", "S0OPS"]}


def test_every_kind_is_an_event_type_the_audit_log_knows() -> None:
    kinds = [kind for member in typing.get_args(ApprovalEvent)
             for kind in (member.__subclasses__() if member is GlassFollowedUp else [member])]
    assert len(kinds) == 10 and all(kind.type in EVENT_TYPES for kind in kinds)
    assert len({kind.type for kind in kinds}) == len(kinds)
