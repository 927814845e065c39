"""Crash tests with real process death at each point of a step, then recovery by a restarted worker.

Each scenario's run is brought to where the crash should happen; a child process then carries
it on with one failpoint set to `exit` and dies there (`os._exit`, no cleanup). Once the dead
workers' leases run out, a fresh runner does what a restarted worker does (`recover()`, then
`execute()` for every id it returns) and the tests check the promises: no non-idempotent side
effect ran twice, none ran without an approval, every run is settled or waiting for a person,
and the audit log says what happened.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, update
from store_harness import (
    APPROVER,
    REQUESTER,
    SEND,
    Told,
    build_runner,
    crash_child,
    side_effects,
    worker_context,
)

from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import notices
from signoff.runtime.failpoints import FailpointHit
from signoff.runtime.records import AlreadyDone, Decided, Done
from signoff.runtime.runner import Runner
from signoff.runtime.state import TERMINAL

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Scenario:
    point: str
    model: str
    """`scripted:send` proposes the non-idempotent tool, `scripted:send-once` the idempotent one."""
    stage: str
    """Where the parent leaves the run for the child: running, paused (awaiting a decision) or approved."""
    status: str
    """The run's status once recovered."""
    executions: int
    """How many times the tool ran in all."""
    audit: tuple[str, ...]
    """Event types the run's audit log must hold."""


SCENARIOS = [
    Scenario("after_decision", "scripted:send", "running", "awaiting_approval", 0,
             ("run_started", "approval_requested")),
    Scenario("after_ledger_row", "scripted:send", "approved", "needs_reconciliation", 0,
             ("approval_recorded", "execution_started", "needs_reconciliation")),
    Scenario("after_ledger_row", "scripted:send-once", "approved", "done", 1,
             ("execution_started", "execution_retried", "tool_executed", "finished")),
    Scenario("after_tool", "scripted:send", "approved", "needs_reconciliation", 1,
             ("execution_started", "needs_reconciliation")),
    Scenario("after_tool", "scripted:send-once", "approved", "done", 2,
             ("execution_started", "execution_retried", "tool_executed", "finished")),
    Scenario("after_approval_recorded", "scripted:send", "paused", "done", 1,
             ("approval_recorded", "execution_started", "tool_executed", "finished")),
    Scenario("after_checkpoint", "scripted:send", "approved", "done", 1,
             ("execution_started", "tool_executed", "finished")),
    Scenario("before_approval_post", "scripted:send", "running", "awaiting_approval", 0,
             ("approval_requested",)),
]


def prepare(runner: Runner, scenario: Scenario) -> tuple[str, list[str]]:
    """Start a run, bring it to the scenario's stage, and return it with the child's action."""
    run = runner.start_run(f"crash at {scenario.point}", REQUESTER, model=scenario.model)
    if scenario.stage == "running":
        # Saved once (started, status running) and left before the first policy call.
        stopping = build_runner(runner.store, Path("unused"), failpoints="after_checkpoint=raise")
        with pytest.raises(FailpointHit):
            stopping.execute(run.run_id)
        return run.run_id, ["execute", run.run_id]
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    if scenario.stage == "paused":
        return run.run_id, ["decide", approval.approval_id, approval.digest, APPROVER]
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    return run.run_id, ["execute", run.run_id]


def wait_for_leases(store: SqlStore) -> None:
    """Sleep until every lease a dead worker held has run out, and no longer."""
    leases = [r.lease_expires_at for r in store.list_runs(limit=100) if r.lease_expires_at is not None]
    if leases:
        time.sleep(max(0.0, (max(leases) - datetime.now(UTC)).total_seconds()) + 0.05)


def problems_of(runner: Runner, run_id: str, scenario: Scenario, effects: Path) -> list[str]:
    """Every broken promise for one crashed and recovered run."""
    run = runner.get_run(run_id)
    key = f"{run_id}:1"
    ran = [k for _, k in side_effects(effects) if k.startswith(run_id + ":")]
    once_only = [k for tool, k in side_effects(effects) if tool == SEND and k.startswith(run_id + ":")]
    timeline = runner.timeline(run_id)
    found = {e["type"] for e in timeline}
    approval = runner.store.approval_for_key(key)
    problems = []
    if run.status != scenario.status:
        problems.append(f"status {run.status}, expected {scenario.status} (stop: {run.stop})")
    if len(ran) != scenario.executions:
        problems.append(f"the tool ran {len(ran)} times, expected {scenario.executions}")
    if len(once_only) > 1:
        problems.append(f"the non-idempotent tool ran {len(once_only)} times")
    if ran and set(ran) != {key}:
        problems.append(f"the tool ran with keys {ran}, expected only {key}")
    if ran and (approval is None or approval.status != "consumed" or approval.decided_by != APPROVER):
        problems.append(f"the tool ran without a consumed approval: {approval}")
    if not (run.status in TERMINAL or run.status in ("awaiting_approval", "needs_reconciliation")):
        problems.append(f"left {run.status}: neither settled nor waiting for a person")
    if run.status == "awaiting_approval" and (approval is None or approval.status != "pending"):
        problems.append(f"awaiting approval, but nobody can give it: {approval}")
    if missing := [t for t in scenario.audit if t not in found]:
        problems.append(f"audit log lacks {missing}: {[e['type'] for e in timeline]}")
    if [e["seq"] for e in timeline] != list(range(1, len(timeline) + 1)):
        problems.append("audit log sequence has gaps")
    if run.lease_expires_at is not None and run.lease_expires_at > datetime.now(UTC):
        problems.append(f"lease still held by {run.lease_owner}")
    return problems


def test_every_crash_point_recovers_without_a_double_or_unapproved_side_effect(
        database_url: str, engine: Engine, effects: Path) -> None:
    store = SqlStore(engine)
    told = Told()
    runner = build_runner(store, effects, lease=1.0, worker_id="restarted-worker", notifier=told)
    runs = [(scenario, *prepare(runner, scenario)) for scenario in SCENARIOS]
    told.calls.clear()

    context = worker_context()
    children = [context.Process(target=crash_child, args=(database_url, str(effects), scenario.point, action))
                for scenario, _, action in runs]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=60)
    assert [c.exitcode for c in children] == [137] * len(children), "every child must die at its failpoint"

    wait_for_leases(store)
    recovered = runner.recover(min_age=timedelta(0))
    # The run that died about to post its approval needs no worker: recover() posts the approval
    # itself, but not while the post may be on its way (it died before or after it: nobody knows).
    [(_, unposted, _)] = [r for r in runs if r[0].point == "before_approval_post"]
    assert sorted(recovered) == sorted(run_id for _, run_id, _ in runs if run_id != unposted)
    [approval] = store.list_approvals(run_id=unposted)
    assert told.of("approval_requested") == []
    with engine.begin() as conn:  # its post's fence passes (`run_notices.REPOST_AFTER`)
        conn.execute(update(notices).where(notices.c.run_id == unposted).values(next_at=datetime.now(UTC)))
    runner.recover(min_age=timedelta(0))
    assert told.of("approval_requested") == [approval.approval_id]
    assert store.get_approval(approval.approval_id).message is not None
    for run_id in recovered:
        runner.execute(run_id)

    problems = {f"{s.point} ({s.model})": p for s, run_id, _ in runs if (p := problems_of(runner, run_id, s, effects))}
    assert problems == {}
    assert runner.recover(min_age=timedelta(0)) == []
    assert told.of("approval_requested").count(approval.approval_id) == 1, "posted once, not on every pass"

    # The run that died before its proposal was saved asks again, once, and completes when approved.
    [(_, waiting, _)] = [r for r in runs if r[0].point == "after_decision"]
    [approval] = runner.store.list_approvals(run_id=waiting)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    assert runner.execute(waiting) == "done"
    assert [k for t, k in side_effects(effects) if k.startswith(waiting)] == [f"{waiting}:1"]


def _crash(database_url: str, effects: Path, point: str, action: list[Any]) -> None:
    child = worker_context().Process(target=crash_child, args=(database_url, str(effects), point, action))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 137, "the child must die at its failpoint"


def test_a_crash_during_a_requested_retry_asks_again_and_never_runs_the_call_a_third_time(
        database_url: str, engine: Engine, effects: Path) -> None:
    """Retry pressed once on a non-idempotent call of unknown outcome; the process dies while the
    retried call runs. Recovery must not run it again: the run waits for a person once more, and
    is told so, and the old Retry button (or a replay of its click) does nothing."""
    store = SqlStore(engine)
    told = Told()
    runner = build_runner(store, effects, lease=1.0, worker_id="restarted-worker", notifier=told)
    run = runner.start_run("send one email", REQUESTER, model="scripted:send")
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    _crash(database_url, effects, "after_tool", ["execute", run.run_id])  # ran once, outcome lost
    wait_for_leases(store)
    for run_id in runner.recover(min_age=timedelta(0)):
        runner.execute(run_id)
    stopped = runner.get_run(run.run_id)
    assert stopped.status == "needs_reconciliation"

    assert isinstance(runner.reconcile(run.run_id, APPROVER, "retry", shown_version=stopped.version), Done)
    _crash(database_url, effects, "after_tool", ["execute", run.run_id])  # the retry ran, outcome lost again
    assert len(side_effects(effects)) == 2
    wait_for_leases(store)
    told.calls.clear()
    recovered = runner.recover(min_age=timedelta(0))
    assert run.run_id not in recovered, "nothing is left for a worker to do: a person must decide"
    for run_id in recovered:
        runner.execute(run_id)

    again = runner.get_run(run.run_id)
    assert again.status == "needs_reconciliation"
    assert len(side_effects(effects)) == 2, "recovery must not run the call a third time"
    [row] = store.executions(run.run_id)
    assert (row["status"], row["attempts"]) == ("started", 2)
    assert told.of("run_stopped") == [run.run_id], "people are asked again"
    assert isinstance(runner.reconcile(run.run_id, APPROVER, "retry", shown_version=stopped.version), AlreadyDone)
    assert runner.recover(min_age=timedelta(0)) == []

    # A new, deliberate Retry on the message as it is now is one more execution, and the run goes on.
    assert isinstance(runner.reconcile(run.run_id, APPROVER, "retry", shown_version=again.version), Done)
    assert runner.execute(run.run_id) == "done"
    assert len(side_effects(effects)) == 3
