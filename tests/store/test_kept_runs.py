"""A worker keeps the runs it let pause as it left them, so that a decision's pass resumes one
without reading its whole history again; what it kept is used only while it is still the run as
stored. Run on SQLite, PostgreSQL and in memory."""

from __future__ import annotations

from pathlib import Path

from store_harness import APPROVER, REQUESTER, SEND, build_runner, side_effects

from signoff.runtime.ports import Store
from signoff.runtime.records import Decided
from signoff.runtime.runner import Runner


def approve_pending(deciding: Runner, run_id: str) -> str | None:
    approval = deciding.pending_approval(run_id)
    assert approval is not None
    assert isinstance(deciding.decide(approval.approval_id, approval.digest, APPROVER, True, drive=True), Decided)
    return deciding.execute(run_id)


def test_a_run_another_replica_went_on_with_is_read_again_not_resumed_from_what_was_kept(
        store: Store, effects: Path) -> None:
    replica_a, replica_b = build_runner(store, effects, lease=30.0), build_runner(store, effects, lease=30.0)
    run = replica_a.start_run("send three emails", REQUESTER, model="scripted:send-twice")
    assert replica_a.execute(run.run_id) == "awaiting_approval"  # replica A keeps the run as it paused it
    assert approve_pending(replica_b, run.run_id) == "awaiting_approval"  # B goes on: the first email
    # A decides the second email: what it kept is the run before B's step, and must not be resumed.
    assert approve_pending(replica_a, run.run_id) == "awaiting_approval"
    assert approve_pending(replica_b, run.run_id) == "done"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1"), (SEND, f"{run.run_id}:2"), (SEND, f"{run.run_id}:3")]
    finished = store.get_run(run.run_id)
    assert finished is not None
    results = [entry for entry in finished.state["history"] if entry["role"] == "tool"]
    assert len(results) == 3, "every step of both replicas is in the history, in order"


def test_a_paused_run_is_kept_as_it_was_left_and_forgotten_once_it_ends(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run = runner.start_run("send three emails", REQUESTER, model="scripted:send-twice")
    assert runner.execute(run.run_id) == "awaiting_approval"
    kept = runner.worker.kept.whole(store.get_run(run.run_id, history=False))
    assert kept is not None, "the paused run is kept as it was left"
    assert kept.state["history"] == store.get_run(run.run_id).state["history"]
    for _ in range(2):
        assert approve_pending(runner, run.run_id) == "awaiting_approval"
    assert approve_pending(runner, run.run_id) == "done"
    assert store.get_run(run.run_id).status == "done"
    assert runner.worker.kept.whole(store.get_run(run.run_id, history=False)) is None, "an ended run is not kept"
