"""Calls their caller runs: an approval asked for by a program outside Signoff, decided like any
run's call (policy, approval, edit, expiry), handed over instead of run, started exactly once
and recorded as the caller reports it; a caller that goes quiet leaves the call to a person.

Every store: the rules are the runner's and the loop's, so each adapter must behave the same."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from store_harness import APPROVER, REQUESTER, ManualClock, Told, build_runner

from signoff.runtime.caller_runs import CallerCall, NotStarted, Started, caller_owner, run_tools
from signoff.runtime.judging import Caller
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.ports import Store
from signoff.runtime.records import Decided, Done
from signoff.runtime.replay import replay
from signoff.runtime.runner import Runner

REFUND = CallerCall(tool="refund", args={"order": "A-1", "amount": 40}, description="Refund an order.",
                    timeout_s=60)


def asked(runner: Runner, call: CallerCall = REFUND, request_id: str | None = None) -> str:
    run, _ = runner.ask_for_caller(call, "refund A-1: the parcel never came", REQUESTER,
                                   origin={"channel": "C1"}, request_id=request_id)
    return run.run_id


def approve(runner: Runner, run_id: str, user: str = APPROVER) -> None:
    approval = runner.pending_approval(run_id)
    assert approval is not None
    outcome = runner.decide(approval.approval_id, approval.digest, user, True, "ok", drive=True)
    assert isinstance(outcome, Decided)
    runner.execute(run_id)


def events(runner: Runner, run_id: str) -> list[str]:
    return [e["type"] for e in runner.timeline(run_id)]


@pytest.fixture
def told() -> Told:
    return Told()


@pytest.fixture
def runner(store: Store, tmp_path: Path, told: Told) -> Runner:
    return build_runner(store, tmp_path / "effects.log", notifier=told)


def test_an_approved_call_is_handed_to_its_caller_started_once_and_recorded(runner: Runner, told: Told) -> None:
    run_id = asked(runner)
    assert runner.get_run(run_id).status == "awaiting_approval"
    assert told.of("approval_requested"), "the card is posted as for any run's call"
    assert isinstance(runner.start_call(run_id), NotStarted), "nothing starts before a person approves"

    approve(runner, run_id)
    assert runner.get_run(run_id).status == "awaiting_caller"
    started = runner.start_call(run_id)
    assert isinstance(started, Started)
    assert (started.tool, started.args, started.key) == ("refund", {"order": "A-1", "amount": 40}, f"{run_id}:1")
    again = runner.start_call(run_id)
    assert isinstance(again, NotStarted), "a second start never gets the call"
    assert runner.store.running_call(run_id) == ("refund", started.key)

    assert runner.report_call(run_id, True, {"refund_id": "R-9"}) == "done"
    [row] = runner.store.executions(run_id)
    assert (row["status"], row["result"]) == ("succeeded", {"refund_id": "R-9"})
    assert told.of("tool_result") == [run_id], "the result is posted in the card's thread"
    said = events(runner, run_id)
    assert said.index("approval_recorded") < said.index("call_handed_to_caller") < said.index("execution_started") \
        < said.index("tool_executed") < said.index("finished")
    assert runner.report_call(run_id, True, {"refund_id": "R-10"}) in (None, "done")
    assert runner.store.executions(run_id)[0]["result"] == {"refund_id": "R-9"}, "an outcome is recorded once"


def test_a_denied_call_is_never_handed_over(runner: Runner) -> None:
    run_id = asked(runner)
    approval = runner.pending_approval(run_id)
    assert approval is not None
    runner.decide(approval.approval_id, approval.digest, APPROVER, False, "no refunds today", drive=True)
    runner.execute(run_id)
    assert runner.get_run(run_id).status == "done"
    assert isinstance(runner.start_call(run_id), NotStarted)
    assert runner.store.executions(run_id) == []


def test_the_caller_runs_the_arguments_the_approver_edited(runner: Runner) -> None:
    run_id = asked(runner)
    approval = runner.pending_approval(run_id)
    assert approval is not None
    runner.edit(approval.approval_id, approval.digest, APPROVER, {"order": "A-1", "amount": 25})
    runner.execute(run_id)
    approve(runner, run_id)
    started = runner.start_call(run_id)
    assert isinstance(started, Started) and started.args == {"order": "A-1", "amount": 25}


def test_a_rule_that_allows_the_call_hands_it_over_unasked(store: Store, tmp_path: Path, told: Told) -> None:
    policy = parse_policy("rules:\n  - name: small refunds\n    tool: refund\n    when: args.amount < 100\n"
                          "    decision: allow\n", source="policy.yaml")
    runner = build_runner(store, tmp_path / "effects.log", notifier=told, approval_policy=policy)
    run_id = asked(runner)
    assert runner.get_run(run_id).status == "awaiting_caller"
    assert not told.of("approval_requested")
    started = runner.start_call(run_id)
    assert isinstance(started, Started)
    assert runner.report_call(run_id, False, error="the payment service said no") == "done"
    [row] = runner.store.executions(run_id)
    assert (row["status"], row["error"]) == ("failed", "the payment service said no")
    assert not told.calls, "a call the policy decided alone is posted nowhere (the audit log keeps it)"


def test_a_call_allowed_unasked_whose_caller_goes_quiet_is_still_taken_to_a_person(
        store: Store, tmp_path: Path, clock: ManualClock, told: Told) -> None:
    policy = parse_policy("rules:\n  - name: small refunds\n    tool: refund\n    when: args.amount < 100\n"
                          "    decision: allow\n", source="policy.yaml")
    runner = build_runner(store, tmp_path / "effects.log", notifier=told, approval_policy=policy)
    run_id = asked(runner)
    assert isinstance(runner.start_call(run_id), Started)
    clock.advance(seconds=61)
    assert run_id in runner.recover()
    runner.execute(run_id)
    assert runner.get_run(run_id).status == "needs_reconciliation"
    assert told.of("run_started") == [run_id] and told.of("run_stopped") == [run_id], \
        "quiet until it needs a person, then told in full"


def test_a_caller_that_never_reports_leaves_the_call_to_a_person(runner: Runner, clock: ManualClock,
                                                                  told: Told) -> None:
    run_id = asked(runner)
    approve(runner, run_id)
    assert isinstance(runner.start_call(run_id), Started)
    assert run_id not in runner.recover(), "the caller holds the run for the call's time limit"
    clock.advance(seconds=61)
    assert run_id in runner.recover()
    runner.execute(run_id)
    run = runner.get_run(run_id)
    assert run.status == "needs_reconciliation"
    assert told.of("run_stopped") == [run_id], "a person is asked whether it took effect"
    assert runner.report_call(run_id, True, {"late": True}) == "needs_reconciliation"
    assert runner.store.executions(run_id)[0]["status"] == "started", "a late report is not taken as the truth"


def test_an_approval_the_caller_does_not_use_in_time_expires_without_running(
        store: Store, tmp_path: Path, clock: ManualClock) -> None:
    runner = build_runner(store, tmp_path / "effects.log", dispatch_window=timedelta(minutes=5))
    run_id = asked(runner)
    approve(runner, run_id)
    clock.advance(minutes=6)
    refused = runner.start_call(run_id)
    assert isinstance(refused, NotStarted)
    assert runner.get_run(run_id).status in ("expired", "done")
    assert runner.store.executions(run_id) == []
    approval = runner.store.approval_for_key(f"{run_id}:1")
    assert approval is not None and approval.status == "expired"


def test_a_replayed_request_gets_the_run_it_made_first(runner: Runner) -> None:
    first, made = runner.ask_for_caller(REFUND, "refund A-1", REQUESTER, request_id="key-1:refund-A-1")
    again, made_again = runner.ask_for_caller(REFUND, "refund A-1", REQUESTER, request_id="key-1:refund-A-1")
    assert (made, made_again) == (True, False) and again.run_id == first.run_id
    first = first.run_id
    assert len(runner.store.list_approvals(run_id=first)) == 1


def test_the_caller_holds_the_run_while_it_runs_the_call(runner: Runner, clock: ManualClock) -> None:
    run_id = asked(runner)
    approve(runner, run_id)
    assert isinstance(runner.start_call(run_id), Started)
    held = runner.get_run(run_id, history=False)
    assert str(held.lease_owner).startswith(caller_owner(run_id))
    assert runner.execute(run_id) is None, "no worker takes the run from its caller"
    # A start retried (or raced) never holds, shortens or lets go of the caller's lease: once the
    # workers' own lease would have lapsed, nobody takes the run for a lost call.
    assert isinstance(runner.start_call(run_id), NotStarted)
    after = runner.get_run(run_id, history=False)
    assert (after.lease_owner, after.lease_expires_at) == (held.lease_owner, held.lease_expires_at)
    clock.advance(seconds=5)
    assert run_id not in runner.recover()
    assert runner.report_call(run_id, True, {"refund_id": "R-1"}) == "done"



@pytest.mark.parametrize("ending", ["succeeded", "failed", "lost", "denied"])
def test_a_caller_s_run_replays_identically(runner: Runner, clock: ManualClock, ending: str) -> None:
    """`signoff runs replay` (and the fault suite's I7) re-drives a caller's run with its own call."""
    run_id = asked(runner)
    approval = runner.pending_approval(run_id)
    assert approval is not None
    if ending == "denied":
        runner.decide(approval.approval_id, approval.digest, APPROVER, False, "not today", drive=True)
        runner.execute(run_id)
    else:
        approve(runner, run_id)
        assert isinstance(runner.start_call(run_id), Started)
        if ending == "lost":
            clock.advance(seconds=61)
            runner.execute(run_id)
        else:
            runner.report_call(run_id, ending == "succeeded", {"refund_id": "R-1"}, "the bank said no")
    run = runner.get_run(run_id)
    result = replay(run.state, runner.timeline(run_id), run_tools(run, runner.tools),
                    caller=Caller(run.requester, "C1"))
    assert result.divergence is None, result.divergence
    assert result.status == run.status


def test_an_approval_nobody_decides_expires_and_the_call_is_never_handed_over(runner: Runner,
                                                                               clock: ManualClock) -> None:
    run_id = asked(runner)
    clock.advance(minutes=31)  # past the default policy's 30 minutes
    assert [a.run_id for a in runner.expire_due()] == [run_id]
    assert runner.get_run(run_id).status == "expired"
    assert isinstance(runner.start_call(run_id), NotStarted)
    assert runner.store.executions(run_id) == []


def test_a_quorum_rule_hands_the_call_over_only_once_enough_people_approved(
        store: Store, tmp_path: Path, told: Told) -> None:
    policy = parse_policy("rules:\n  - name: two people\n    tool: refund\n    approvers: [U0LEE, U0KIM, U0ADA]\n"
                          "    quorum: 2\n", source="policy.yaml")
    runner = build_runner(store, tmp_path / "effects.log", notifier=told, approval_policy=policy)
    run_id = asked(runner)
    approval = runner.pending_approval(run_id)
    assert approval is not None
    runner.decide(approval.approval_id, approval.digest, "U0LEE", True, drive=True)
    runner.execute(run_id)
    assert runner.get_run(run_id).status == "awaiting_approval"
    assert isinstance(runner.start_call(run_id), NotStarted), "one of two approvals starts nothing"
    assert isinstance(runner.decide(approval.approval_id, approval.digest, "U0KIM", True, drive=True), Decided)
    runner.execute(run_id)
    assert runner.get_run(run_id).status == "awaiting_caller"
    assert isinstance(runner.start_call(run_id), Started)


def test_a_caller_that_will_wait_less_than_the_policy_says_gets_its_shorter_time_limit(runner: Runner) -> None:
    run_id = asked(runner, CallerCall(tool="refund", args={"order": "A-9", "amount": 40}, ttl_s=120))
    approval = runner.pending_approval(run_id)
    assert approval is not None
    assert approval.expires_at - approval.requested_at == timedelta(seconds=120)
    longer = asked(runner, CallerCall(tool="refund", args={"order": "A-10", "amount": 40}, ttl_s=86_400))
    approval = runner.pending_approval(longer)
    assert approval is not None
    assert approval.expires_at - approval.requested_at == timedelta(minutes=30), "never longer than the policy's"


def test_a_read_nobody_is_asked_about_is_handed_over_started_once_and_recorded(runner: Runner, told: Told) -> None:
    read = CallerCall(tool="lookup_order", args={"order": "A-1"}, side_effect=False)
    run_id = asked(runner, read)
    assert runner.get_run(run_id).status == "awaiting_caller" and not told.of("approval_requested")
    started = runner.start_call(run_id)
    assert isinstance(started, Started), started
    assert isinstance(runner.start_call(run_id), NotStarted), "a read too starts once"
    assert runner.report_call(run_id, True, {"status": "shipped"}) == "done"
    [row] = runner.store.executions(run_id)
    assert (row["status"], row["result"]) == ("succeeded", {"status": "shipped"})


def test_approve_and_allow_similar_lets_the_caller_s_next_similar_call_run_unasked(
        store: Store, tmp_path: Path, told: Told) -> None:
    """A grant scoped to the requester covers the key's later calls (each is a run of its own)."""
    policy = parse_policy("rules:\n  - name: refunds\n    tool: refund\n    approvers: [U0LEE]\n"
                          "    grant: {for: 30m, same: [order], scope: requester}\n", source="policy.yaml")
    runner = build_runner(store, tmp_path / "effects.log", notifier=told, approval_policy=policy)
    first = asked(runner, CallerCall(tool="refund", args={"order": "A-1", "amount": 40}))
    approval = runner.pending_approval(first)
    assert approval is not None
    decided = runner.decide(approval.approval_id, approval.digest, "U0LEE", True, grant=True, drive=True)
    assert isinstance(decided, Decided) and decided.grant is not None
    runner.execute(first)
    similar = asked(runner, CallerCall(tool="refund", args={"order": "A-1", "amount": 15}))
    assert runner.get_run(similar).status == "awaiting_caller", "handed over under the grant, nobody asked"
    assert runner.pending_approval(similar) is None
    assert isinstance(runner.start_call(similar), Started)
    assert store.get_grant(decided.grant.grant_id).uses == 1, "its use counted as the call started"
    other = asked(runner, CallerCall(tool="refund", args={"order": "B-2", "amount": 15}))
    assert runner.get_run(other).status == "awaiting_approval", "another order is asked about"


def test_a_cancel_left_while_the_caller_runs_the_call_waits_for_its_outcome(runner: Runner) -> None:
    """The run is cancelled once the caller has said what came of the call it started, never over
    it: the outcome is recorded first, then the request applies."""
    run_id = asked(runner)
    approve(runner, run_id)
    assert isinstance(runner.start_call(run_id), Started)
    assert isinstance(runner.cancel(run_id, REQUESTER, "changed my mind"), Done)
    assert runner.report_call(run_id, True, {"refund_id": "R-7"}) == "cancelled"
    [row] = runner.store.executions(run_id)
    assert (row["status"], row["result"]) == ("succeeded", {"refund_id": "R-7"})
