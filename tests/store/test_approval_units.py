"""A command's unit of work (`approval_unit.ApprovalUnit`), on every store: what a command saves is
kept whole when it ends and not at all if it raises, and every store picks the same approvals as due,
in the same order, so a sweep written once (`approval_commands`) does the same on each."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from store_harness import LEASE, snapshot
from test_policy_runs import LEE, NUDGING, paused, runner_with

from signoff.runtime import approval_commands
from signoff.runtime.approval import dispatch, vote
from signoff.runtime.approval_unit import Due
from signoff.runtime.ports import Store
from signoff.runtime.receipts import decision_receipt
from signoff.runtime.records import Decided
from signoff.runtime.rules import execution_started

KEY = Ed25519PrivateKey.generate()


class Interrupted(Exception):
    """The command failed after it saved: a bug, a lost connection, a process told to stop."""


def decide_in(store: Store, approval_id: str, *, fail: bool) -> None:
    """What `approval_commands.decide` does with a receipt and a lease, failing at its very end when asked."""
    with store.approval_unit() as unit:
        approval = unit.approval(approval_id)
        assert approval is not None
        voted, change = vote(approval, user=LEE, approved=True, now=unit.now)
        assert isinstance(voted, Decided) and change is not None
        unit.save([change])
        unit.keep_receipt(decision_receipt(voted.approval, KEY, start_within=timedelta(minutes=10)))
        assert unit.take_lease(approval.run_id, "w9", LEASE)
        if fail:
            raise Interrupted


def test_a_unit_that_raises_keeps_nothing_it_saved_and_one_that_ends_keeps_all_of_it(
        store: Store, effects: Path, clock: Any) -> None:
    run, approval = paused(runner_with(store, effects, NUDGING))
    before = snapshot(store, run.run_id)

    with pytest.raises(Interrupted):
        decide_in(store, approval.approval_id, fail=True)
    assert snapshot(store, run.run_id) == before  # still pending: no vote, no event, no grant
    assert store.receipt_of(approval_id=approval.approval_id) is None
    assert store.get_run(run.run_id).lease_owner is None

    decide_in(store, approval.approval_id, fail=False)
    assert store.get_approval(approval.approval_id).status == "approved"
    assert [e["type"] for e in store.timeline(run.run_id)][-1] == "approval_recorded"
    assert store.receipt_of(approval_id=approval.approval_id) is not None
    assert store.get_run(run.run_id).lease_owner == "w9"


def due_ids(store: Store, which: Due, limit: int | None = None) -> list[str]:
    with store.approval_unit() as unit:
        return [approval.approval_id for approval in unit.due(which, limit)]


def test_every_store_picks_the_same_approvals_as_due_oldest_first(store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, NUDGING)  # ten minutes to decide; reminders at 5 and 9, escalation at 6
    asked = []
    for _ in range(3):
        asked.append(paused(runner)[1].approval_id)
        clock.advance(minutes=1)
    first, second, third = asked  # asked at 0, 1 and 2 minutes

    clock.advance(minutes=3, seconds=30)  # 6:30 after the first
    assert due_ids(store, Due.NUDGE) == [first, second]  # the third's reminder is due at 7:00
    assert due_ids(store, Due.NUDGE, limit=1) == [first]
    assert due_ids(store, Due.EXPIRY) == []

    assert isinstance(approval_commands.decide(store, second, approved=True, user=LEE), Decided)
    assert due_ids(store, Due.NUDGE) == [first]  # a decided approval is nobody's to remind

    clock.advance(minutes=5, seconds=30)  # 12:00 after the first
    assert due_ids(store, Due.EXPIRY) == [first, third]  # the third expired at 12:00, as it was asked
    assert due_ids(store, Due.NUDGE) == []  # an expired approval is reminded of no more
    assert due_ids(store, Due.GLASS) == []  # nobody broke the glass
    assert [a.approval_id for a in approval_commands.expire_due(store)] == [first, third]
    assert due_ids(store, Due.EXPIRY) == []


def test_a_call_start_that_raises_uses_nothing_up(store: Store, effects: Path, clock: Any) -> None:
    """What `starting_calls.begin_execution` writes for an approved call, failing before it ends:
    the lease is not renewed, the approval is not used up, the ledger has no row, the log no event."""
    runner = runner_with(store, effects, NUDGING)
    run, approval = paused(runner)
    assert isinstance(approval_commands.decide(store, approval.approval_id, approved=True, user=LEE), Decided)
    assert store.claim(run.run_id, "w1", LEASE)
    before = snapshot(store, run.run_id), store.get_run(run.run_id).lease_expires_at
    clock.advance(seconds=5)

    with pytest.raises(Interrupted), store.approval_unit() as unit:
        held = unit.renew_lease(run.run_id, "w1", LEASE)
        assert held is not None and held.requester == run.requester
        assert unit.execution(approval.key) is None
        latest = unit.latest_approval(approval.key)
        assert latest is not None and latest.approval_id == approval.approval_id
        used = dispatch(latest, run_id=run.run_id, key=approval.key, digest=approval.digest, now=unit.now,
                        window=timedelta(minutes=10))
        assert not isinstance(used, tuple)
        unit.save([used])
        unit.start_execution(run.run_id, approval.key, approval.tool, approval.digest)
        unit.append(run.run_id, [execution_started(approval.key, approval.tool, approval_id=approval.approval_id)])
        raise Interrupted
    assert (snapshot(store, run.run_id), store.get_run(run.run_id).lease_expires_at) == before

    with store.approval_unit() as unit:
        assert unit.renew_lease(run.run_id, "w2", LEASE) is None  # the fence: only the lease's holder
