"""Replicas whose clocks are minutes apart, on one PostgreSQL: the database's clock decides.

A replica's wall clock is moved (`scenarios.skewed`: every reading the process and its gunicorn
worker make; monotonic clocks are left alone), the way a host with a drifting or misset clock
would run. Leases, expiry and sweeps must not notice:

- ahead: a replica 90 s fast must not take runs from live workers on the other replica (its
  sweep would think every lease long expired), so every call runs once, with its outcome
  recorded, and every model call is charged to its run;
- behind: a replica 4 min slow must not post approvals that are already expired for everybody
  else, nor accept a click after the card's expiry time. (Four, not five: Slack's signatures are
  good for five minutes, and a replica five minutes off refuses every request as a replay.)
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from scenarios.drive import APPROVER, REQUESTER, approval_message, has_ended, posted_approval, started_run
from scenarios.outcome import Outcome, observed
from scenarios.serve import click_body
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION

SLOW_SCRIPT = [
    {"tool": "lookup", "args": {"query": "order A-3003", "delay_s": 5.0}},
    {"tool": "send_note", "args": {"to": "hal@example.com", "text": "Your refund is on its way."}},
    {"tool": "lookup", "args": {"query": "order A-3003 again", "delay_s": 5.0}},
    {"final": "Hal was told."},
]
SCRIPT = [
    {"tool": "send_note", "args": {"to": "ida@example.com", "text": "Your order shipped."}},
    {"final": "Ida was told."},
]
LEASE_SECONDS = "4"
"""Shorter than the slow lookups, so only the heartbeat keeps a live worker's lease; long enough that
a heartbeat (every third of it) delayed by a loaded machine, the test run's other worker beside it,
still lands in time."""


def run_replica_ahead(runs: int = 6) -> Outcome:
    outcome = Outcome("clocks/replica-90s-ahead/postgres", "clocks", runs=runs, faults=1)
    env = {"SIGNOFF_LEASE_SECONDS": LEASE_SECONDS}
    with observed(outcome, lambda: World("postgres", SLOW_SCRIPT, env=env)) as world:
        on_time = world.start()
        ahead = world.start(clock_offset=90)
        run_ids = [started_run(on_time.command(f"skew run {i}: tell Hal about his refund", REQUESTER).text)
                   for i in range(runs)]
        for run_id in run_ids:
            approval = wait_until(lambda run_id=run_id: posted_approval(world, run_id), 30, what=f"{run_id}'s approval")
            message = approval_message(world, approval.approval_id)
            ahead.post(click_body(message, APPROVE_ACTION, APPROVER))  # the fast replica hears the click
        for run_id in run_ids:
            try:
                wait_until(lambda run_id=run_id: has_ended(world, run_id), 60, interval=0.2, what=f"{run_id} to end")
            except TimeoutError as exc:
                outcome.expectations.append(str(exc))
        store = world.db.store
        for run_id in run_ids:
            run = store.get_run(run_id)
            outcome.expect(run.status == "done", f"{run_id} ended {run.status} ({run.stop}), not done")
            executions = store.executions(run_id)
            outcome.expect([(e["status"], e["attempts"]) for e in executions] == [("succeeded", 1)],
                           f"{run_id}: the ledger says {executions}")
            calls = sum(1 for e in run.state["history"] if e.get("role") == "assistant")
            outcome.expect(run.usage["model_calls"] == calls == len(SLOW_SCRIPT),
                           f"{run_id}: {calls} model calls made, {run.usage['model_calls']} charged")
            conflicts = [e for e in store.timeline(run_id) if e["type"] in ("command_refused", "needs_reconciliation")]
            outcome.expect(not conflicts, f"{run_id}: {conflicts}")
        stolen = world.logs().count("another worker will continue it") + world.logs().count("no longer holds")
        outcome.expect(stolen == 0, f"{stolen} times a worker found its run taken from it")
        outcome.notes.append(f"{runs} runs driven by an on-time replica beside one 90 s fast")
    return outcome


def run_replica_behind() -> Outcome:
    outcome = Outcome("clocks/replica-4min-behind/postgres", "clocks", runs=2, faults=1)
    ttl = 6
    env = {"SIGNOFF_LEASE_SECONDS": LEASE_SECONDS, "SIGNOFF_APPROVAL_TTL": f"{ttl}s"}
    with observed(outcome, lambda: World("postgres", SCRIPT, env=env)) as world:
        world.start()  # an on-time replica, whose sweep expires whatever the slow one wrote as overdue
        behind = world.start(clock_offset=-240)
        store = world.db.store

        # Posted by the slow replica, the approval is open for its whole TTL by the database's clock.
        first = started_run(behind.command("tell Ida her order shipped", REQUESTER).text)
        approval = wait_until(lambda: posted_approval(world, first), 30, what="the first approval")
        outcome.expect(approval.expires_at - approval.requested_at == timedelta(seconds=ttl),
                       f"expires {approval.expires_at - approval.requested_at} after it was requested")
        outcome.expect(approval.expires_at > datetime.now(UTC) + timedelta(seconds=ttl / 3),
                       f"expires at {approval.expires_at:%H:%M:%S}, already past or nearly")
        time.sleep(1.0)
        outcome.expect(store.get_approval(approval.approval_id).status == "pending",
                       "the approval expired as soon as it was posted")
        behind.post(click_body(approval_message(world, approval.approval_id), APPROVE_ACTION, APPROVER))
        _settle(outcome, world, first, "done")

        # A click after the card's expiry time, on the slow replica (for which it is 4 minutes early).
        second = started_run(behind.command("tell Ida again", REQUESTER).text)
        late = wait_until(lambda: posted_approval(world, second), 30, what="the second approval")
        message = approval_message(world, late.approval_id)
        time.sleep(max(0.0, (late.expires_at - datetime.now(UTC)).total_seconds()) + 1.5)
        behind.post(click_body(message, APPROVE_ACTION, APPROVER))
        _settle(outcome, world, second, "expired")
        outcome.expect(store.get_approval(late.approval_id).status == "expired",
                       f"a click after expiry left the approval {store.get_approval(late.approval_id).status}")
        outcome.expect(not [e for e in world.effect_lines() if e.get("key", "").startswith(second)],
                       "a click after expiry executed the call")
        outcome.notes.append("a replica 4 min slow posted one approval and heard a click after another expired")
    return outcome


def _settle(outcome: Outcome, world: World, run_id: str, status: str) -> None:
    try:
        wait_until(lambda: has_ended(world, run_id), 30, interval=0.1, what=f"{run_id} to end")
    except TimeoutError as exc:
        outcome.expectations.append(str(exc))
        return
    run = world.db.store.get_run(run_id, history=False)
    outcome.expect(run.status == status, f"{run_id} ended {run.status} ({run.stop}), not {status}")



