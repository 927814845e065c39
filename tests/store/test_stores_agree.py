"""The memory store and the SQL store, given the same commands in the same order, answer the same
and end the same: votes, quorums, reminders, escalations, expiry, and calls started through the
ledger, whatever the order. They cannot disagree because neither decides: each only opens the unit
of work the commands run in (`approval_unit`); this is the test that says so, over sequences
nobody wrote by hand."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from store_harness import REQUESTER, ManualClock, build_runner
from test_policy_runs import ADA, KIM, LEE, policy

from signoff.runtime import approval_commands, starting_calls
from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.memory import MemoryStore
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.errors import Conflict
from signoff.runtime.ports import Store
from signoff.runtime.records import ApprovalRecord
from signoff.runtime.rules import CANCEL, EDIT
from tests.conftest import fresh_database_url

OUTSIDER = "U0OUT"
AGREED = policy(f"""
rules:
  - name: agreed
    tool: send_email
    approvers: [{LEE}, {KIM}]
    quorum: 2
    ttl: 10m
    remind: [50%]
    escalate: {{after: 6m, to: [{ADA}]}}
""")
RUNS = 2
LEASE = timedelta(seconds=30)
WINDOW = timedelta(minutes=3)

VOTE = st.tuples(st.just("vote"), st.integers(0, RUNS - 1), st.sampled_from([LEE, KIM, ADA, OUTSIDER]),
                 st.sampled_from([True] * 6 + [False]))  # a deny ends it: mostly approves
ADVANCE = st.tuples(st.just("advance"), st.integers(1, 6))
WORKER = st.sampled_from(["w1", "w2"])
COMMAND = st.one_of(
    VOTE, VOTE, VOTE, ADVANCE, ADVANCE,
    st.tuples(st.just("expire")),
    st.tuples(st.just("nudge")),
    st.tuples(st.just("claim"), st.integers(0, RUNS - 1), WORKER),
    st.tuples(st.just("start"), st.integers(0, RUNS - 1), WORKER),
    st.tuples(st.just("cancel"), st.integers(0, RUNS - 1), st.sampled_from([None, 0, -1])),
    st.tuples(st.just("edit"), st.integers(0, RUNS - 1), st.integers(0, RUNS - 1)),
)
"""A command, as either store is given it. A lease is 30 s and the clock moves in minutes: a claim
holds until the next `advance`, and a start is fenced on it. A cancel is pressed on a message
showing the run as it is now (0), as it was a version ago (-1), or on none (None). An edit of one
run names the approval of another run, or its own (the same index)."""


@dataclass
class Paused:
    """One store with `RUNS` runs waiting on their approval, and its clock."""

    store: Store
    clock: ManualClock
    approvals: list[ApprovalRecord]

    def index(self, approval_id: str) -> int:
        return next(i for i, a in enumerate(self.approvals) if a.approval_id == approval_id)


@contextmanager
def both_stores() -> Iterator[tuple[Paused, Paused]]:
    with tempfile.TemporaryDirectory() as folder:
        urls = fresh_database_url("sqlite", Path(folder))
        engine = make_engine(next(urls))
        try:
            memory_clock, sql_clock = ManualClock(), ManualClock()
            sql_clock.now = memory_clock.now
            yield (paused(MemoryStore(clock=memory_clock), memory_clock, Path(folder) / "memory"),
                   paused(SqlStore(engine, clock=sql_clock), sql_clock, Path(folder) / "sql"))
        finally:
            engine.dispose()


def paused(store: Store, clock: ManualClock, effects: Path) -> Paused:
    effects.mkdir()
    runner = build_runner(store, effects, lease=30.0, approval_policy=AGREED)
    asked = []
    for index in range(RUNS):
        run = runner.start_run(f"tell Ana about refund {index}", REQUESTER)
        assert runner.execute(run.run_id) == "awaiting_approval"
        approval = runner.pending_approval(run.run_id)
        assert approval is not None
        asked.append(approval)
    return Paused(store, clock, asked)


def apply(side: Paused, command: tuple[Any, ...]) -> Any:
    """`command` on one store, its answer with the store's own ids turned into run indexes."""
    store = side.store
    match command:
        case ("vote", index, user, approved):
            voted = approval_commands.decide(store, side.approvals[index].approval_id, approved=approved, user=user)
            approval = getattr(voted, "approval", None)
            return type(voted).__name__, approval.status if approval is not None else None
        case ("advance", minutes):
            side.clock.advance(minutes=minutes)
            return None
        case ("expire",):
            return sorted(side.index(a.approval_id) for a in approval_commands.expire_due(store))
        case ("nudge",):
            return sorted((side.index(n.approval.approval_id), n.kinds) for n in approval_commands.nudge_due(store))
        case ("cancel", index, shown):
            run = store.get_run(side.approvals[index].run_id, history=False)
            assert run is not None
            command = {"op": "cancel", "by": REQUESTER, "reason": "not needed",
                       "shown_version": None if shown is None else run.version + shown}
            refusal = approval_commands.set_command(store, run.run_id, command, CANCEL)
            return refusal.reason if refusal is not None else None
        case ("edit", index, named):
            approval = side.approvals[named]
            command = {"op": "edit", "by": LEE, "approval_id": approval.approval_id, "digest": approval.digest,
                       "args": {**approval.args, "body": "refund approved, with thanks"}, "key": approval.key}
            refusal = approval_commands.set_command(store, side.approvals[index].run_id, command, EDIT)
            return refusal.reason if refusal is not None else None
        case ("claim", index, owner):
            claimed = store.claim(side.approvals[index].run_id, owner, LEASE)
            return claimed.lease_owner if claimed is not None else None
        case ("start", index, owner):
            approval = side.approvals[index]
            try:
                started = starting_calls.begin_execution(store, approval.run_id, approval.tool, dict(approval.args),
                                                         approval.key, owner=owner, lease=LEASE,
                                                         dispatch_window=WINDOW)
            except Conflict:
                return "not this worker's lease"
            return type(started).__name__, getattr(started, "status", None)
    raise AssertionError(command)


def ending(side: Paused) -> list[Any]:
    """What each run's approval, audit log and ledger say, without the store's own ids and times."""
    found = []
    for asked in side.approvals:
        approval = side.store.get_approval(asked.approval_id)
        run = side.store.get_run(asked.run_id, history=False)
        assert approval is not None and run is not None
        waiting = {k: v for k, v in (run.command or {}).items() if k not in ("approval_id", "digest", "key")}
        found.append((run.status, run.version, waiting, approval.status, approval.decided_by, approval.asked, approval.nudges, approval.quorum,
                      [(v.user, v.approved) for v in approval.votes],
                      [e["type"] for e in side.store.timeline(asked.run_id)],
                      [(e["status"], e["attempts"]) for e in side.store.executions(asked.run_id)]))
    return found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands=st.lists(COMMAND, min_size=4, max_size=24))
@example(commands=[("advance", 5), ("nudge",), ("advance", 5), ("expire",), ("vote", 1, LEE, True)])
@example(commands=[("vote", 0, LEE, True), ("cancel", 0, -1), ("cancel", 0, 0), ("cancel", 0, None),
                   ("vote", 0, KIM, True), ("cancel", 1, None), ("expire",)])
@example(commands=[("vote", 0, LEE, True), ("vote", 0, KIM, True), ("start", 0, "w1"), ("claim", 0, "w1"),
                   ("claim", 0, "w2"), ("start", 0, "w2"), ("start", 0, "w1"), ("start", 0, "w1"),
                   ("vote", 1, LEE, True), ("vote", 1, LEE, True), ("advance", 6), ("vote", 1, ADA, True),
                   ("vote", 1, KIM, True), ("advance", 4), ("claim", 1, "w2"), ("start", 1, "w2")])
def test_the_memory_and_sql_stores_answer_every_command_alike_and_end_alike(commands: list[tuple[Any, ...]]) -> None:
    with both_stores() as (memory, sql):
        for step, command in enumerate(commands):
            assert apply(memory, command) == apply(sql, command), f"step {step}: {command}"
        assert ending(memory) == ending(sql)
