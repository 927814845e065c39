"""The runner end to end on every store: approve, deny, cancel, extend, retry and reconcile. The runner
needs nothing but `ports.Store`, so each flow runs on SQLite, PostgreSQL and in memory alike."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from store_harness import (
    APPROVER,
    REQUESTER,
    SCRIPTS,
    SEND,
    SEND_ONCE,
    ManualClock,
    SendArgs,
    build_runner,
    edit_state,
    make_tools,
    scripted_policies,
    side_effects,
)

from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.budget import Budget
from signoff.runtime.errors import ModelUnavailable
from signoff.runtime.failpoints import FailpointHit
from signoff.runtime.ports import Store
from signoff.runtime.records import AlreadyDecided, Decided, Done, Expired, Mismatch, NotAllowed, RunRecord
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig
from signoff.tools.base import Tool


def paused(runner: Runner, model: str = "scripted:send") -> tuple[RunRecord, Any]:
    """A started run waiting for approval of its first call, and that approval."""
    run = runner.start_run("tell Ana her refund is approved", REQUESTER, model=model)
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    assert approval is not None
    return run, approval


def approved(runner: Runner, model: str = "scripted:send") -> tuple[RunRecord, Any]:
    run, approval = paused(runner, model)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True, "fine"), Decided)
    return run, approval


def types(runner: Runner, run_id: str) -> list[str]:
    return [e["type"] for e in runner.timeline(run_id)]


def observations(runner: Runner, run_id: str) -> list[dict[str, Any]]:
    return [e for e in runner.get_run(run_id).state["history"] if e["role"] == "tool"]


class Recording:
    """Policies that remember every history they were shown: what the model saw."""

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    def __call__(self, model: str) -> Any:
        scripted = scripted_policies(model)

        def policy(history: list[dict[str, Any]]) -> Any:
            self.seen.append(history)
            return scripted(history)
        return policy


def test_approve_then_execute_runs_the_call_once(runner: Runner, effects: Path) -> None:
    run, approval = paused(runner)
    assert side_effects(effects) == []
    assert approval.args == SCRIPTS["scripted:send"][0]["args"] and approval.key == f"{run.run_id}:1"
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    assert runner.execute(run.run_id) == "done"
    assert runner.execute(run.run_id) is None
    assert side_effects(effects) == [(SEND, approval.key)]
    assert runner.get_approval(approval.approval_id).status == "consumed"
    late = runner.decide(approval.approval_id, approval.digest, "U_OTHER", True)
    assert isinstance(late, AlreadyDecided) and late.approval.decided_by == APPROVER
    assert types(runner, run.run_id) == [
        "run_created", "run_started", "decision", "approval_requested", "approval_recorded",
        "execution_started", "approval_decided", "tool_executed", "decision", "finished",
    ]


def test_a_denial_reaches_the_model_with_the_note(store: Store, effects: Path) -> None:
    seen = Recording()
    runner = build_runner(store, effects, policies=seen)
    run, approval = paused(runner)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, False, "wrong customer"),
                      Decided)
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == []
    told = [e for e in seen.seen[-1] if e["role"] == "tool"]
    assert told == [{"role": "tool", "step": 1, "tool": SEND, "call_id": "call-1",
                     "error": "denied by human: wrong customer", "error_kind": "denied"}]
    assert runner.get_approval(approval.approval_id).status == "denied"


def test_the_requester_cannot_approve_their_own_run(runner: Runner, effects: Path) -> None:
    run, approval = paused(runner)
    outcome = runner.decide(approval.approval_id, approval.digest, REQUESTER, True)
    assert isinstance(outcome, NotAllowed) and "someone else" in outcome.reason
    assert runner.get_approval(approval.approval_id).status == "pending"
    assert runner.execute(run.run_id) == "awaiting_approval"
    assert side_effects(effects) == []


def test_what_waits_on_an_approver_is_two_queries_however_many_wait(sql_runner: Runner,
                                                                    sql_store: SqlStore) -> None:
    runner, store = sql_runner, sql_store
    waiting = [paused(runner) for _ in range(5)]
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        pairs = runner.waiting_on(APPROVER)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert {(r.run_id, a.approval_id) for r, a in pairs} == {(r.run_id, a.approval_id) for r, a in waiting}
    assert all(run.state["status"] == "awaiting_approval" for run, _ in pairs)
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 2


def test_only_approvers_see_and_decide_pending_approvals(store: Store, effects: Path) -> None:
    runner = Runner(store, make_tools(effects), scripted_policies, RunnerConfig(model="scripted:send"),
                    may_approve=lambda user, run, approvers: None if user == APPROVER else "only the on-call lead approves")
    run, approval = paused(runner)
    assert [a.approval_id for a in runner.approvals_for(APPROVER)] == [approval.approval_id]
    assert runner.approvals_for("U_RANDOM") == [] and runner.approvals_for(REQUESTER) == []
    outcome = runner.decide(approval.approval_id, approval.digest, "U_RANDOM", True)
    assert outcome == NotAllowed("only the on-call lead approves")
    assert runner.get_approval(approval.approval_id).status == "pending"


def test_a_click_for_different_arguments_is_refused(runner: Runner) -> None:
    run, approval = paused(runner)
    outcome = runner.decide(approval.approval_id, "0" * 64, APPROVER, True)
    assert isinstance(outcome, Mismatch)
    assert runner.get_approval(approval.approval_id).status == "pending"


def test_tampered_arguments_are_not_executed(sql_runner: Runner, sql_store: Store, effects: Path) -> None:
    runner, store = sql_runner, sql_store
    run, approval = approved(runner)
    pending = {**runner.get_run(run.run_id).state["pending"], "args": {"to": "mallory@example.com"}}
    edit_state(store.engine, run.run_id, pending=pending)
    assert runner.execute(run.run_id) == "failed"
    assert side_effects(effects) == []
    stop = runner.get_run(run.run_id).stop
    assert "no longer matches what was approved" in stop["reason"]
    assert runner.get_approval(approval.approval_id).status == "approved"


def test_cancel_while_awaiting_approval_closes_the_approval(runner: Runner, effects: Path) -> None:
    run, approval = paused(runner)
    assert isinstance(runner.cancel(run.run_id, REQUESTER, "not needed"), Done)
    assert runner.get_approval(approval.approval_id).status == "cancelled"
    late = runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    assert isinstance(late, AlreadyDecided) and late.approval.status == "cancelled"
    assert runner.execute(run.run_id) == "cancelled"
    assert side_effects(effects) == []
    assert runner.get_run(run.run_id).command is None
    assert "cancelled" in types(runner, run.run_id)
    assert run.run_id not in runner.recover()


def test_an_approval_that_expires_ends_the_run_unexecuted(runner: Runner, clock: ManualClock, effects: Path) -> None:
    run, approval = paused(runner)
    clock.advance(minutes=31)
    assert [a.approval_id for a in runner.expire_due()] == [approval.approval_id]
    assert runner.get_run(run.run_id).status == "expired"
    outcome = runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    assert isinstance(outcome, Expired) and outcome.approval.status == "expired"
    assert side_effects(effects) == []


def test_an_approval_that_expires_between_click_and_dispatch_is_not_executed(
        runner: Runner, clock: ManualClock, effects: Path) -> None:
    run, approval = approved(runner)
    clock.advance(minutes=31)
    assert runner.execute(run.run_id) == "expired"
    assert side_effects(effects) == []
    outcome = runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    assert isinstance(outcome, Expired | AlreadyDecided) and outcome.approval.status == "expired"


def test_extend_after_the_budget_ran_out_continues(runner: Runner) -> None:
    run = runner.start_run("find the orders", REQUESTER, model="scripted:lookups", budget=Budget(max_steps=2))
    assert runner.execute(run.run_id) == "budget_exhausted"
    assert isinstance(runner.extend(run.run_id, REQUESTER), NotAllowed)
    assert isinstance(runner.extend(run.run_id, APPROVER), Done)
    assert runner.execute(run.run_id) == "done"
    final = runner.get_run(run.run_id)
    assert (final.answer, final.budget["max_steps"], final.state["steps"]) == ("found", 6, 4)
    assert "budget_extended" in types(runner, run.run_id)


def test_retry_after_a_failure_continues_from_the_checkpoint(store: Store, effects: Path) -> None:
    failures = [ModelUnavailable("503 from the model endpoint")]

    def flaky(model: str) -> Any:
        scripted = scripted_policies(model)

        def policy(history: list[dict[str, Any]]) -> Any:
            if len(history) > 2 and failures:
                raise failures.pop()
            return scripted(history)
        return policy

    runner = build_runner(store, effects, policies=flaky)
    run = runner.start_run("find the orders", REQUESTER, model="scripted:lookups")
    assert runner.execute(run.run_id) == "failed"
    assert runner.get_run(run.run_id).stop["reason"] == "model unavailable"
    assert isinstance(runner.retry(run.run_id, REQUESTER), Done)
    assert runner.execute(run.run_id) == "done"
    assert [e["result"]["q"] for e in observations(runner, run.run_id)] == ["page 0", "page 1", "page 2"]


def crash_after_tool(store: Store, effects: Path, model: str) -> tuple[Runner, RunRecord]:
    """Approve a call, then let the worker die after the tool ran and before its outcome was saved."""
    crashing = build_runner(store, effects, failpoints="after_tool=raise", lease=30.0)
    run, _ = approved(crashing, model)
    with pytest.raises(FailpointHit):
        crashing.execute(run.run_id)
    assert len(side_effects(effects)) == 1
    return build_runner(store, effects, lease=30.0), run


def test_an_unknown_outcome_of_a_non_idempotent_call_waits_for_a_person(store: Store, effects: Path) -> None:
    runner, run = crash_after_tool(store, effects, "scripted:send")
    assert runner.execute(run.run_id) == "needs_reconciliation"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]
    stopped = runner.get_run(run.run_id)
    assert stopped.stop["key"] == f"{run.run_id}:1" and stopped.state["pending"]["tool"] == SEND
    assert [x["status"] for x in store.executions(run.run_id)] == ["started"]
    assert types(runner, run.run_id)[-1] == "needs_reconciliation"


def test_an_unknown_outcome_of_an_idempotent_call_reruns_it_with_the_same_key(store: Store,
                                                                              effects: Path) -> None:
    runner, run = crash_after_tool(store, effects, "scripted:send-once")
    assert runner.execute(run.run_id) == "done"
    key = f"{run.run_id}:1"
    assert side_effects(effects) == [(SEND_ONCE, key), (SEND_ONCE, key)]
    [row] = store.executions(run.run_id)
    assert (row["status"], row["attempts"]) == ("succeeded", 2)
    assert "execution_retried" in types(runner, run.run_id)


@pytest.mark.parametrize("action", ["done", "retry", "abort"])
def test_reconcile_settles_an_unknown_outcome(store: Store, effects: Path, action: str) -> None:
    runner, run = crash_after_tool(store, effects, "scripted:send")
    assert runner.execute(run.run_id) == "needs_reconciliation"
    assert isinstance(runner.reconcile(run.run_id, REQUESTER, action), NotAllowed)
    result = {"sent_to": "ana@example.com", "checked": "in the mail log"}
    assert isinstance(runner.reconcile(run.run_id, APPROVER, action, result=result, note="checked"), Done)
    status = runner.execute(run.run_id)
    key = f"{run.run_id}:1"
    [row] = store.executions(run.run_id)
    reconciled = [e for e in runner.timeline(run.run_id) if e["type"] == "reconciled"]
    assert [(e["action"], e["by"]) for e in reconciled] == [(action, APPROVER)]
    match action:
        case "done":
            assert status == "done" and side_effects(effects) == [(SEND, key)]
            assert (row["status"], row["result"]) == ("succeeded", result)
            assert observations(runner, run.run_id)[-1]["result"] == result
        case "retry":
            assert status == "done" and side_effects(effects) == [(SEND, key), (SEND, key)]
            assert (row["status"], row["attempts"]) == ("succeeded", 2)
        case "abort":
            assert status == "cancelled" and side_effects(effects) == [(SEND, key)]


def test_a_cancel_that_arrives_as_the_run_finishes_is_settled(store: Store, effects: Path) -> None:
    """A person cancels while the model writes its final answer: the run ends done, and no command lingers."""
    runs: list[RunRecord] = []

    def cancelling(model: str) -> Any:
        def policy(history: list[dict[str, Any]]) -> Any:
            assert isinstance(runner.cancel(runs[0].run_id, REQUESTER, "too slow"), Done)
            return {"final": "all done"}
        return policy

    runner = build_runner(store, effects, policies=cancelling)
    run = runner.start_run("say hi", REQUESTER, model="scripted:lookups")
    runs.append(run)
    assert runner.execute(run.run_id) == "done"
    assert runner.get_run(run.run_id).command is None
    assert run.run_id not in runner.recover()
    assert "command_refused" in types(runner, run.run_id)



class SlowSend:
    """A send that blocks mid-call until told to finish, so a test can act while the tool runs."""

    def __init__(self, effects: Path) -> None:
        self.effects, self.started, self.finish = effects, threading.Event(), threading.Event()

    def __call__(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        self.started.set()
        self.finish.wait(10)
        with self.effects.open("a") as f:
            f.write(f"{SEND} {key}\n")
        return {"sent_to": args["to"]}

    def runner(self, store: Store, lease: float, worker_id: str = "w1") -> Runner:
        tools = {SEND: Tool(SEND, self, side_effect=True, args_model=SendArgs, timeout_s=None)}
        return Runner(store, tools, scripted_policies, RunnerConfig(
            model="scripted:send", lease=timedelta(seconds=lease), worker_id=worker_id))


def while_the_tool_runs(slow: SlowSend, first: Runner, run_id: str, meanwhile: Any) -> str | None:
    """Execute with `first` in a thread, call `meanwhile()` while its tool runs, and return its status."""
    status: list[str | None] = []
    worker = threading.Thread(target=lambda: status.append(first.execute(run_id)))
    worker.start()
    try:
        assert slow.started.wait(10)
        meanwhile()
    finally:
        slow.finish.set()
        worker.join(10)
    [result] = status
    return result


def test_two_threads_of_one_worker_never_drive_the_same_run_at_once(store: Store, effects: Path) -> None:
    """The bot's pool and its scheduler share one runner: the lease must exclude threads, not only processes."""
    slow = SlowSend(effects)
    runner = slow.runner(store, lease=30.0)
    run, approval = approved(runner)

    def second_pass() -> None:
        assert runner.execute(run.run_id) is None, "the run is leased to the pass that is running its tool"

    assert while_the_tool_runs(slow, runner, run.run_id, second_pass) == "done"
    assert side_effects(effects) == [(SEND, approval.key)]


def test_a_worker_renews_its_lease_through_a_long_tool_call(engine: Any, effects: Path) -> None:
    """Real clock: the call outlives the lease three times over, and another worker still cannot take the run.

    The lease is a second: a heartbeat every third of it leaves two thirds for a loaded machine's
    stalls, where a shorter one made the test measure the machine rather than the renewal."""
    slow = SlowSend(effects)
    store = SqlStore(engine)
    first, other = slow.runner(store, lease=1.0, worker_id="w1"), slow.runner(store, lease=1.0, worker_id="w2")
    run, approval = approved(first)

    def try_to_take_over() -> None:
        for _ in range(3):
            time.sleep(1.0)
            assert other.execute(run.run_id) is None

    assert while_the_tool_runs(slow, first, run.run_id, try_to_take_over) == "done"
    assert side_effects(effects) == [(SEND, approval.key)]


def test_leases_of_overlapping_long_calls_are_all_kept_when_one_pass_ends(engine: Any, tmp_path: Path) -> None:
    """Real clock. One heartbeat serves every run a process drives: two calls run at once, the
    first ends after a lease and a half, and the second's lease is still renewed until it ends."""
    store = SqlStore(engine)
    short, long = SlowSend(tmp_path / "short"), SlowSend(tmp_path / "long")
    runners = [short.runner(store, lease=1.0, worker_id="w1"), long.runner(store, lease=1.0, worker_id="w1")]
    other = short.runner(store, lease=1.0, worker_id="w2")
    runs = [approved(runner)[0] for runner in runners]
    statuses: dict[str, str | None] = {}
    passes = [threading.Thread(target=lambda r=runner, run=run: statuses.update({run.run_id: r.execute(run.run_id)}))
              for runner, run in zip(runners, runs, strict=True)]
    for thread in passes:
        thread.start()
    try:
        assert short.started.wait(10) and long.started.wait(10)
        for second in range(4):
            time.sleep(0.75)
            if second == 1:
                short.finish.set()
                passes[0].join(10)
            assert all(other.execute(run.run_id) is None for run in runs if statuses.get(run.run_id) is None)
    finally:
        short.finish.set()
        long.finish.set()
        for thread in passes:
            thread.join(10)
    assert statuses == {run.run_id: "done" for run in runs}
    assert len(side_effects(tmp_path / "short")) == len(side_effects(tmp_path / "long")) == 1
