"""The agent loop's events as types: each writes the JSON the audit log has always kept for its kind
(what `Draft.emit(type, **fields)` wrote, key for key and in the same order), the fields whose
absence says something left out rather than written as null; and a field misspelt, left out or
added is an error where the event is made."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from agent_fakes import Outbox, call, send_email_tool

from signoff.runtime import Budget, requests
from signoff.runtime.call_events import (
    AfterEdit,
    ApprovalDecided,
    ApprovalReopened,
    ApprovalRequested,
    ApprovalTimedOut,
    AskedAgain,
    CallAllowedByGrant,
    CallAllowedByRule,
    CallDeniedByRule,
    CallEdited,
    CallHandedToCaller,
    CallReconsidered,
    GrantLapsed,
    GrantNotApplied,
    InTurn,
    NewPreview,
    PreviewChanged,
    Proposed,
    Reconciled,
    Reconsidered,
    RequestedAgain,
    ToolExecuted,
    ToolFailed,
)
from signoff.runtime.events import ENDINGS, EVENT_TYPES
from signoff.runtime.judging import Context
from signoff.runtime.loop import Reply
from signoff.runtime.loop_events import (
    BudgetExtended,
    Cancelled,
    Ended,
    FinalDecision,
    Finished,
    LoopEvent,
    MalformedDecision,
    Retried,
    RunStarted,
    ToolDecision,
    VersionsChanged,
    as_events,
    run_ended,
)
from signoff.runtime.replay import AGENT_EVENTS
from signoff.runtime.replies import after_reply
from signoff.runtime.schema import NO_USAGE, BudgetLimits, RunState
from signoff.runtime.schema import Stop as StopReason
from signoff.runtime.state import DEFAULT_REDACT_KEYS

CALL = {"key": "run-1:2", "tool": "send_email"}
ARGS = {"to": "ana@example.com", "subject": "Refund"}


def written(event: LoopEvent) -> list[tuple[str, Any]]:
    """`event` as a step writes it at step 2 of run-1, key order and all."""
    (said,) = as_events([event], run_id="run-1", step=2)
    return list(said.items())


def emitted(event_type: str, **payload: Any) -> list[tuple[str, Any]]:
    """What `Draft.emit(event_type, **payload)` wrote at step 2 of run-1, before events were typed."""
    return list({"type": event_type, "run_id": "run-1", "step": 2, **payload}.items())


def kinds() -> list[type[LoopEvent]]:
    """Every kind of event the loop writes (an ending: each of `Ended`'s kinds)."""
    return [kind for member in typing.get_args(LoopEvent)
            for kind in (member.__subclasses__() if member is Ended else [member])]


def test_the_run_s_own_events_write_what_they_always_wrote() -> None:
    budget = Budget(max_steps=8).to_json()
    assert written(RunStarted(goal="email Ana", budget=BudgetLimits.model_validate(budget))) == emitted(
        "run_started", goal="email Ana", budget=budget)
    assert written(ToolDecision(tool="send_email", args=ARGS)) == emitted(
        "decision", kind="tool", tool="send_email", args=ARGS)
    assert written(FinalDecision()) == emitted("decision", kind="final")
    assert written(MalformedDecision(error="no tool named")) == emitted("decision", kind="malformed",
                                                                        error="no tool named")
    was, now = {"model": "a", "prompt": None}, {"model": "b", "prompt": None}
    assert written(VersionsChanged(was=was, now=now)) == emitted("versions_changed", was=was, now=now)
    assert written(BudgetExtended(limits={"max_steps": 12})) == emitted("budget_extended", limits={"max_steps": 12})
    assert written(Finished(answer="sent", usage=NO_USAGE)) == emitted("finished", answer="sent",
                                                                       usage=NO_USAGE.to_json())


def test_a_retry_names_the_stop_it_goes_on_from_even_when_there_was_none() -> None:
    stop = StopReason(reason="model unavailable", step=2, detail="503")
    assert written(Retried(previous=stop)) == emitted("retried", previous={"reason": "model unavailable", "step": 2,
                                                                           "detail": "503"})
    assert written(Retried(previous=None)) == emitted("retried", previous=None)


def test_an_ending_is_named_by_its_status_and_writes_the_usage_then_the_stop() -> None:
    stop = StopReason(reason="wrong run", step=2, by=None)
    ending = run_ended("cancelled", NO_USAGE, stop)
    assert isinstance(ending, Cancelled)
    assert written(ending) == emitted("cancelled", **{"usage": NO_USAGE.to_json(), **stop.to_json()})
    assert dict(written(ending))["by"] is None  # given as None: written, as the stop keeps it
    stalled = run_ended("stalled", NO_USAGE, StopReason(reason="looping", step=2, repeats=3))
    assert written(stalled) == emitted("stalled", usage=NO_USAGE.to_json(), reason="looping", step=2, repeats=3)
    assert {kind.type for kind in Ended.__subclasses__()} == set(ENDINGS.values())
    with pytest.raises(ValueError, match="does not stop"):
        run_ended("done", NO_USAGE, stop)


def test_the_policy_s_and_the_grants_verdicts_write_what_they_always_wrote() -> None:
    assert written(CallAllowedByRule(**CALL, rule="internal", policy="p1")) == emitted(
        "call_allowed_by_rule", **CALL, rule="internal", policy="p1")
    assert written(CallAllowedByRule(**CALL, rule=None, policy="p1", errors=("rule 'x': no such field",))) == emitted(
        "call_allowed_by_rule", **CALL, rule=None, policy="p1", errors=["rule 'x': no such field"])
    assert written(CallDeniedByRule(**CALL, rule="no-mail", reason="not today", policy="p1")) == emitted(
        "call_denied_by_rule", **CALL, rule="no-mail", reason="not today", policy="p1")
    assert written(CallDeniedByRule(**CALL, rule="no-mail", reason="not today", at_dispatch=True,
                                    policy="p1")) == emitted(
        "call_denied_by_rule", **CALL, rule="no-mail", reason="not today", at_dispatch=True, policy="p1")
    assert written(GrantNotApplied(**CALL, rule="mail", grant_id="grt_1", reason="revoked", policy="p1")) == emitted(
        "grant_not_applied", **CALL, rule="mail", grant_id="grt_1", reason="revoked", policy="p1")
    assert written(CallAllowedByGrant(**CALL, rule="mail", grant_id="grt_1", granted_by="U1", policy="p1",
                                      errors=("e",))) == emitted(
        "call_allowed_by_grant", **CALL, rule="mail", grant_id="grt_1", granted_by="U1", policy="p1", errors=["e"])


@pytest.mark.parametrize(("why", "said"), [
    (Proposed(policy="p1"), {"policy": "p1"}),
    (Proposed(policy="p1", errors=("e",)), {"policy": "p1", "errors": ["e"]}),
    (InTurn(policy="p1", batch=3), {"policy": "p1", "batch": 3}),
    (Reconsidered(reason="its tool changed", policy="p1"), {"supersedes": True, "reason": "its tool changed",
                                                            "policy": "p1"}),
    (AfterEdit(edited_by=None, policy="p1"), {"edited_by": None, "policy": "p1"}),
    (AskedAgain(policy="p1"), {"again": True, "policy": "p1"}),
    (GrantLapsed(policy="p1", reason="revoked"), {"policy": "p1", "reason": "revoked"}),
    (NewPreview(policy="p1", reason="the preview changed"), {"policy": "p1", "supersedes": True,
                                                             "reason": "the preview changed"}),
])
def test_an_approval_request_says_why_it_is_asked_where_it_always_did(why: Any, said: dict[str, Any]) -> None:
    requested = ApprovalRequested(**CALL, args=ARGS, rule=None, quorum=1, why=why)
    assert written(requested) == emitted("approval_requested", **CALL, args=ARGS, rule=None, quorum=1, **said)


def test_what_people_did_of_a_call_writes_what_it_always_wrote() -> None:
    assert written(ApprovalDecided(**CALL, approved=True, by="U1", note="", approvals=1)) == emitted(
        "approval_decided", **CALL, approved=True, by="U1", note="", approvals=1)
    assert written(ApprovalDecided(**CALL, approved=True, by="U1", note="fire", approvals=1,
                                   break_glass=True)) == emitted(
        "approval_decided", **CALL, approved=True, by="U1", note="fire", approvals=1, break_glass=True)
    assert written(ApprovalReopened(**CALL, rule="two", quorum=2, approvals=1, policy="p2")) == emitted(
        "approval_reopened", **CALL, rule="two", quorum=2, approvals=1, policy="p2")
    assert written(ApprovalTimedOut(**CALL, rule=None, waited="30 minutes")) == emitted(
        "approval_timed_out", **CALL, rule=None, waited="30 minutes")
    assert written(RequestedAgain(**CALL, by=None)) == emitted("requested_again", **CALL, by=None)
    assert written(Reconciled(**CALL, action="done", by="U1", note="")) == emitted(
        "reconciled", **CALL, action="done", by="U1", note="")
    assert written(CallReconsidered(**CALL, reason="deployed", was="c1", now=None)) == emitted(
        "call_reconsidered", **CALL, reason="deployed", was="c1", now=None)
    assert written(CallEdited(**CALL, by="U1", changes=('to: "a" -> "b"',), was=ARGS, now=ARGS)) == emitted(
        "call_edited", **CALL, by="U1", changes=['to: "a" -> "b"'], was=ARGS, now=ARGS)
    assert written(PreviewChanged(**CALL, was=None, now="d2")) == emitted("preview_changed", **CALL, was=None, now="d2")
    assert written(CallHandedToCaller(**CALL, allowed_by=None, granted_by="grt_1")) == emitted(
        "call_handed_to_caller", **CALL, allowed_by=None, granted_by="grt_1")


def test_a_call_s_outcome_names_the_tool_first_and_says_how_it_came_to_run() -> None:
    ran = {"tool": "send_email", "key": "run-1:2", "seconds": 0.25, "side_effect": True}
    assert written(ToolExecuted(**ran, retried=False)) == emitted("tool_executed", **ran, retried=False)
    assert written(ToolExecuted(**ran, reconciled=True)) == emitted("tool_executed", **ran, reconciled=True)
    assert written(ToolFailed(**ran, error="timeout: 30s")) == emitted("tool_failed", **ran, error="timeout: 30s")


def test_a_misspelt_missing_or_unknown_field_is_an_error_where_the_event_is_made() -> None:
    with pytest.raises(TypeError, match="side_efect"):
        ToolExecuted(tool="t", key="k", seconds=0.1, side_efect=True)  # type: ignore[call-arg]  # the point
    with pytest.raises(TypeError, match="side_effect"):
        ToolFailed(tool="t", key="k", seconds=0.1, error="boom")  # type: ignore[call-arg]  # the point
    with pytest.raises(TypeError, match="why"):
        ApprovalRequested(**CALL, args=ARGS, rule=None, quorum=1)  # type: ignore[call-arg]  # the point
    with pytest.raises(TypeError):
        FinalDecision(kind="tool")  # type: ignore[call-arg]  # a kind's constant is not given
    with pytest.raises(dataclasses.FrozenInstanceError):
        RequestedAgain(**CALL, by="U1").by = "U2"  # type: ignore[misc]  # the point


def test_a_transition_hands_out_typed_events_and_writes_them_at_its_step() -> None:
    started = requests.start(RunState.fresh("run-1", Budget(max_steps=8).to_json()), "email Ana")
    context = Context({"send_email": send_email_tool(Outbox())}, DEFAULT_REDACT_KEYS)
    asked = after_reply(started.state, context, Reply(call("send_email", to="ana@example.com", subject="Refund")))
    assert [type(event) for event in asked.events] == [ToolDecision, ApprovalRequested]
    assert all(isinstance(event, typing.get_args(LoopEvent)) for event in (*started.events, *asked.events))
    assert [(e["type"], e["run_id"], e["step"]) for e in asked.as_events()] == [
        ("decision", "run-1", 1), ("approval_requested", "run-1", 1)]


def test_every_kind_is_an_event_type_the_audit_log_knows_and_replay_compares_each_it_knows() -> None:
    types = [kind.type for kind in kinds()]
    assert set(types) <= EVENT_TYPES
    assert len(types) == len(set(types)) + 2  # "decision": one type for each kind of turn
    assert set(types) >= AGENT_EVENTS  # replay compares every kind but three
    assert set(types) - AGENT_EVENTS == {"grant_not_applied", "call_allowed_by_grant", "preview_changed"}
