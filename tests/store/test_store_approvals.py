"""Approvals as a compare-and-set state machine, expiry where it matters, and dispatch through the ledger,
on every adapter. (The SQL statements and constraints behind them: test_sql_rows.py.)"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from store_harness import (
    APPROVER,
    LEASE,
    REQUESTER,
    TTL,
    ManualClock,
    create,
    duplicate_error,
    save,
    snapshot,
    step,
)

from signoff.runtime import approval_commands, starting_calls
from signoff.runtime.effects import AskAbout
from signoff.runtime.errors import Conflict
from signoff.runtime.ports import Store
from signoff.runtime.records import (
    AlreadyDecided,
    ApprovalRecord,
    Decided,
    ExecutionStart,
    Existing,
    Expired,
    Fresh,
    NotDispatchable,
    Restart,
)
from signoff.runtime.rules import CommandRule, step_write
from signoff.runtime.state import call_digest

ARGS = {"body": "refund approved", "to": "ana@example.com"}
WINDOW = timedelta(minutes=10)


def begin(store: Store, args: dict[str, Any] = ARGS, key: str = "run-a:1", *, owner: str = "w1",
          restart: Restart | None = None) -> ExecutionStart:
    """Start the call as its worker does: holding the run's lease."""
    store.claim(key.rsplit(":", 1)[0], owner, LEASE)
    return starting_calls.begin_execution(store, key.rsplit(":", 1)[0], "send_email", args, key, owner=owner, lease=LEASE,
                                 dispatch_window=WINDOW, restart=restart)


def pending_call(run_id: str, step_no: int, args: dict[str, Any] = ARGS) -> dict[str, Any]:
    return {"tool": "send_email", "args": args, "key": f"{run_id}:{step_no}", "step": step_no, "call_id": "c1"}


def await_approval(store: Store, run_id: str = "run-a") -> ApprovalRecord:
    """A run whose first step proposes `send_email` and waits for a person."""
    create(store, run_id)
    store.claim(run_id, "w1", LEASE)
    pending = pending_call(run_id, 1)
    checkpoint = step(store.get_run(run_id).state,
                      {"role": "assistant", "step": 1, "tool": "send_email", "args": ARGS, "call_id": "c1"},
                      events=[{"type": "approval_requested", "key": pending["key"]}], effects=(AskAbout(pending["key"]),),
                      status="awaiting_approval", pending=pending)
    saved = store.save_step(run_id, owner="w1", version=1, checkpoint=checkpoint, write=step_write(checkpoint, TTL),
                            lease=LEASE)
    store.release(run_id, "w1")
    [opened] = saved.approvals
    return opened


def approve(store: Store, approval: ApprovalRecord, user: str = APPROVER) -> None:
    assert isinstance(approval_commands.decide(store, approval.approval_id, approved=True, user=user), Decided)


def test_the_approval_is_written_with_the_awaiting_checkpoint(store: Store, clock: ManualClock) -> None:
    approval = await_approval(store)
    stored = store.approval_for_key("run-a:1")
    assert stored == store.get_approval(approval.approval_id)
    assert (stored.run_id, stored.step, stored.tool, stored.args, stored.status) == (
        "run-a", 1, "send_email", ARGS, "pending")
    assert stored.digest == call_digest("send_email", ARGS, "run-a:1")
    assert (stored.requester, stored.requested_at, stored.expires_at) == (REQUESTER, clock.now, clock.now + TTL)
    assert store.get_run("run-a").status == "awaiting_approval"


def test_a_step_whose_approval_cannot_be_written_is_not_saved(store: Store) -> None:
    """The approval shares the step's transaction: when its insert fails, state, history and events roll back."""
    await_approval(store)
    store.claim("run-a", "w1", LEASE)
    run = store.get_run("run-a")
    before = snapshot(store, "run-a")
    same_key_again = step(run.state, {"role": "runtime", "step": 2, "error": "x"},
                          events=[{"type": "approval_requested", "key": "run-a:1"}], effects=(AskAbout("run-a:1"),),
                          status="awaiting_approval", pending=pending_call("run-a", 1))
    with pytest.raises(duplicate_error(store)):
        save(store, "run-a", run.version, same_key_again)
    assert snapshot(store, "run-a") == before


def test_exactly_one_of_several_deciders_wins_and_the_rest_learn_who(store: Store) -> None:
    approval = await_approval(store)
    outcomes = [approval_commands.decide(store, approval.approval_id, approved=i % 2 == 0, user=f"U{i}", note=f"n{i}")
                for i in range(5)]
    assert isinstance(outcomes[0], Decided)
    assert outcomes[0].approval.status == "approved"
    for outcome in outcomes[1:]:
        assert isinstance(outcome, AlreadyDecided)
        assert (outcome.approval.status, outcome.approval.decided_by, outcome.approval.note) == (
            "approved", "U0", "n0")
    recorded = [e for e in store.timeline("run-a") if e["type"] == "approval_recorded"]
    assert [(e["by"], e["approved"]) for e in recorded] == [("U0", True)]


@pytest.mark.parametrize("late", [timedelta(0), timedelta(seconds=1)], ids=["at_expiry", "after_expiry"])
def test_deciding_once_expired_is_refused_before_any_sweep(store: Store, clock: ManualClock,
                                                           late: timedelta) -> None:
    approval = await_approval(store)
    clock.advance(seconds=(TTL + late).total_seconds())
    outcome = approval_commands.decide(store, approval.approval_id, approved=True, user=APPROVER)
    assert isinstance(outcome, Expired)
    assert outcome.approval.status == "expired" and outcome.approval.decided_by is None
    assert store.get_approval(approval.approval_id).status == "expired"
    assert approval_commands.expire_due(store) == []


def overdue_and_not(store: Store, clock: ManualClock) -> tuple[list[ApprovalRecord], ApprovalRecord,
                                                                ApprovalRecord]:
    """Three approvals past their expiry, one approved in time, and one still open."""
    overdue = [await_approval(store, f"run-{i}") for i in range(3)]
    decided = await_approval(store, "run-decided")
    approve(store, decided)
    clock.advance(minutes=20)
    fresh = await_approval(store, "run-fresh")
    clock.advance(minutes=11)
    return overdue, decided, fresh


def test_expire_due_marks_every_overdue_pending_approval_once(store: Store, clock: ManualClock) -> None:
    overdue, decided, fresh = overdue_and_not(store, clock)
    expired = approval_commands.expire_due(store)
    assert sorted(a.approval_id for a in expired) == sorted(a.approval_id for a in overdue)
    assert {a.status for a in expired} == {"expired"}
    assert approval_commands.expire_due(store) == []
    assert store.get_approval(fresh.approval_id).status == "pending"
    assert store.get_approval(decided.approval_id).status == "approved"
    assert [e["type"] for e in store.timeline("run-0")][-1] == "approval_expired"


def test_concurrent_expiry_sweeps_never_return_an_approval_twice(store: Store, clock: ManualClock) -> None:
    overdue = {await_approval(store, f"run-{i}").approval_id for i in range(12)}
    clock.advance(seconds=TTL.total_seconds() + 1)
    barrier, results, errors = threading.Barrier(4), [], []

    def sweep() -> None:
        try:
            barrier.wait(timeout=10)
            results.append([a.approval_id for a in approval_commands.expire_due(store)])
        except Exception as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    returned = [a for r in results for a in r]
    assert len(results) == 4 and sorted(returned) == sorted(overdue)


def test_dispatch_consumes_the_approval_exactly_once(store: Store) -> None:
    approval = await_approval(store)
    approve(store, approval)
    assert begin(store) == Fresh(1)
    consumed = store.get_approval(approval.approval_id)
    assert consumed.status == "consumed" and consumed.consumed_at is not None
    again = begin(store)
    assert again == Existing("started", None, None)
    [row] = store.executions("run-a")
    assert (row["key"], row["status"], row["attempts"]) == ("run-a:1", "started", 1)
    started = [e for e in store.timeline("run-a") if e["type"] == "execution_started"]
    assert [(e["key"], e["approval_id"]) for e in started] == [("run-a:1", approval.approval_id)]


@pytest.mark.parametrize("decision", ["pending", "denied"])
def test_dispatch_refuses_a_call_that_was_not_approved(store: Store, decision: str) -> None:
    approval = await_approval(store)
    if decision == "denied":
        approval_commands.decide(store, approval.approval_id, approved=False, user=APPROVER, note="no")
    start = begin(store)
    assert isinstance(start, NotDispatchable) and decision in start.reason
    assert store.executions("run-a") == []
    assert store.get_approval(approval.approval_id).status == decision


def test_an_approval_given_in_time_still_runs_after_its_request_would_have_expired(
        store: Store, clock: ManualClock) -> None:
    """The workers were busy until past the TTL: the yes was given in time, so it counts."""
    approval = await_approval(store)
    clock.advance(seconds=TTL.total_seconds() - 5)
    approve(store, approval)
    clock.advance(seconds=60)
    assert begin(store) == Fresh(1)
    assert store.get_approval(approval.approval_id).status == "consumed"


def test_an_approval_not_started_within_the_dispatch_window_expires_unexecuted(
        store: Store, clock: ManualClock) -> None:
    approval = await_approval(store)
    approve(store, approval)
    clock.advance(seconds=WINDOW.total_seconds() + 1)
    start = begin(store)
    assert isinstance(start, NotDispatchable) and start.status == "expired"
    assert "within 10 min of the approval" in start.reason
    expired = store.get_approval(approval.approval_id)
    assert (expired.status, expired.decided_by) == ("expired", APPROVER)
    assert store.executions("run-a") == []
    [event] = [e for e in store.timeline("run-a") if e["type"] == "approval_expired"]
    assert event["approved_by"] == APPROVER


def test_dispatch_refuses_arguments_that_differ_from_the_approved_ones(store: Store) -> None:
    approval = await_approval(store)
    approve(store, approval)
    tampered = {**ARGS, "to": "mallory@example.com"}
    start = begin(store, tampered)
    assert isinstance(start, NotDispatchable) and "no longer matches" in start.reason
    assert begin(store, ARGS, "run-a:2") == NotDispatchable(
        "no approval recorded for run-a:2", "failed")
    assert store.get_approval(approval.approval_id).status == "approved"
    assert store.executions("run-a") == []


def test_the_execution_outcome_commits_with_the_step_that_reports_it(store: Store) -> None:
    approval = await_approval(store)
    approve(store, approval)
    begin(store)
    run = store.get_run("run-a")
    outcome = {"key": "run-a:1", "tool": "send_email", "ok": True, "result": {"id": 7}, "seconds": 0.1}
    done = step(run.state, {"role": "tool", "step": 1, "tool": "send_email", "call_id": "c1", "result": {"id": 7}},
                execution=outcome)
    with pytest.raises(Exception, match="changed since version"):
        save(store, "run-a", run.version - 1, done)
    assert store.executions("run-a")[0]["status"] == "started"
    save(store, "run-a", run.version, done)
    [row] = store.executions("run-a")
    assert (row["status"], row["result"]) == ("succeeded", {"id": 7})


def test_pending_approvals_and_who_may_decide_them(store: Store) -> None:
    first = await_approval(store, "run-a")
    second = await_approval(store, "run-b")
    approve(store, second)
    assert [a.approval_id for a in store.list_approvals(status="pending")] == [first.approval_id]
    assert store.list_approvals(status="pending", exclude_requester=REQUESTER) == []
    assert [a.approval_id for a in store.list_approvals(run_id="run-b")] == [second.approval_id]


def test_only_the_worker_holding_a_live_lease_may_start_a_call(store: Store, clock: ManualClock) -> None:
    """A worker that lost its lease (another took the run) cannot start the call, nor can one whose
    lease ran out: the approval stays unused and the ledger empty."""
    approval = await_approval(store)
    approve(store, approval)
    store.claim("run-a", "w1", LEASE)
    with pytest.raises(Conflict, match="no longer holds its lease"):
        starting_calls.begin_execution(store, "run-a", "send_email", ARGS, "run-a:1", owner="w2", lease=LEASE,
                              dispatch_window=WINDOW)
    clock.advance(seconds=LEASE.total_seconds() + 1)
    with pytest.raises(Conflict):
        starting_calls.begin_execution(store, "run-a", "send_email", ARGS, "run-a:1", owner="w1", lease=LEASE,
                              dispatch_window=WINDOW)
    assert store.get_approval(approval.approval_id).status == "approved"
    assert store.executions("run-a") == []


def test_a_call_with_a_recorded_outcome_is_never_started_again(store: Store) -> None:
    approval = await_approval(store)
    approve(store, approval)
    assert begin(store) == Fresh(1)
    store.complete_execution({"key": "run-a:1", "tool": "send_email", "ok": True, "result": {"id": 1},
                              "seconds": 0.1})
    for restart in ("idempotent", "requested", None):
        assert begin(store, restart=restart) == Existing("succeeded", {"id": 1}, None)  # type: ignore[arg-type]
    [row] = store.executions("run-a")
    assert row["attempts"] == 1


def test_a_requested_retry_restarts_the_call_once_and_uses_the_request_up(store: Store) -> None:
    """The Retry request is consumed with the restart, in one transaction: a crash in the retried
    call leaves no request behind, so recovery cannot run the call a third time."""
    approval = await_approval(store)
    approve(store, approval)
    begin(store)  # ... and the process died in the call: the ledger says "started"
    version = store.get_run("run-a", history=False).version
    approval_commands.set_command(store, "run-a", {"op": "reconcile", "action": "retry", "by": APPROVER},
                      CommandRule(frozenset({"awaiting_approval"})))
    assert begin(store, restart="requested") == Fresh(2, version + 1)
    after = store.get_run("run-a", history=False)
    assert (after.command, after.version) == (None, version + 1)
    assert begin(store, restart="requested") == Existing("started", None, None)
    [row] = store.executions("run-a")
    assert (row["status"], row["attempts"]) == ("started", 2)
    [retried] = [e for e in store.timeline("run-a") if e["type"] == "execution_retried"]
    assert (retried["attempt"], retried["because"], retried["by"]) == (2, "requested", APPROVER)
