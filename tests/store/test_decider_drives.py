"""The decider drives the run it decided: the decision's transaction takes the run's lease for it
(and a new run can be created held by its starter), and a worker with nobody to tell lets go of
the run in the write of its last step. Fewer transactions on the approval path, and every
guarantee kept, on SQLite, PostgreSQL and in memory."""

from __future__ import annotations

from pathlib import Path

from store_harness import (
    APPROVER,
    LEASE,
    REQUESTER,
    SEND,
    ManualClock,
    Told,
    build_runner,
    create,
    lookup_step,
    side_effects,
)

from signoff.runtime import approval_commands
from signoff.runtime.commands import Cancel
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.ports import Store
from signoff.runtime.records import Counted, Decided, RunRecord
from signoff.runtime.rules import CANCEL, StepWrite
from signoff.runtime.runner import Runner

FIRST, SECOND = "U0FIRST", "U0SECOND"


def paused(runner: Runner) -> tuple[RunRecord, str, str]:
    run = runner.start_run("tell Ana her refund is approved", REQUESTER, model="scripted:send")
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    assert approval is not None
    return run, approval.approval_id, approval.digest


def test_a_decision_that_drives_takes_the_lease_and_its_runner_finishes_the_run(store: Store, effects: Path) -> None:
    runner, other = build_runner(store, effects, lease=30.0), build_runner(store, effects, lease=30.0)
    run, approval_id, digest = paused(runner)
    assert store.get_run(run.run_id).lease_owner is None, "a paused run with nobody to tell is not held"
    decided = runner.decide(approval_id, digest, APPROVER, True, drive=True)
    assert isinstance(decided, Decided) and decided.lease is not None
    assert store.get_run(run.run_id).lease_owner == decided.lease
    assert other.execute(run.run_id) is None, "another replica must not drive a run its decider holds"
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]
    finished = store.get_run(run.run_id)
    assert finished.status == "done" and finished.lease_owner is None and finished.lease_expires_at is None


def test_a_decision_without_drive_takes_no_lease(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run, approval_id, digest = paused(runner)
    decided = runner.decide(approval_id, digest, APPROVER, True)
    assert isinstance(decided, Decided) and decided.lease is None
    assert store.get_run(run.run_id).lease_owner is None
    assert runner.execute(run.run_id) == "done"


def test_a_denial_that_drives_takes_the_lease_too(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run, approval_id, digest = paused(runner)
    decided = runner.decide(approval_id, digest, APPROVER, False, note="not today", drive=True)
    assert isinstance(decided, Decided) and decided.lease is not None
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == []


def test_a_vote_short_of_its_quorum_takes_no_lease(store: Store, effects: Path) -> None:
    two_people = parse_policy("rules:\n  - name: two-people\n    tool: send_email\n"
                              f"    approvers: [{FIRST}, {SECOND}]\n    quorum: 2\n", source="policy.yaml")
    runner = build_runner(store, effects, lease=30.0, approval_policy=two_people)
    run, approval_id, digest = paused(runner)
    first = runner.decide(approval_id, digest, FIRST, True, drive=True)
    assert isinstance(first, Counted)
    assert store.get_run(run.run_id).lease_owner is None
    second = runner.decide(approval_id, digest, SECOND, True, drive=True)
    assert isinstance(second, Decided) and second.lease is not None
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]


def test_a_decision_on_a_run_another_worker_holds_leaves_that_lease_alone(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run, approval_id, digest = paused(runner)
    assert store.hold(run.run_id, "recovery/elsewhere", LEASE)
    decided = runner.decide(approval_id, digest, APPROVER, True, drive=True)
    assert isinstance(decided, Decided) and decided.lease is None
    assert store.get_run(run.run_id).lease_owner == "recovery/elsewhere"
    assert runner.execute(run.run_id) is None
    store.release(run.run_id, "recovery/elsewhere")
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]


def test_a_decider_that_never_drives_holds_the_run_only_until_its_lease_lapses(
        store: Store, effects: Path, clock: ManualClock) -> None:
    """The deciding replica crashed between the click and the run: another finishes it, once, later."""
    runner, other = build_runner(store, effects, lease=30.0), build_runner(store, effects, lease=30.0)
    run, approval_id, digest = paused(runner)
    decided = runner.decide(approval_id, digest, APPROVER, True, drive=True)
    assert isinstance(decided, Decided) and decided.lease is not None
    assert run.run_id not in other.recover(), "a live lease keeps recovery off the run"
    clock.advance(seconds=31)
    assert run.run_id in other.recover()
    assert other.execute(run.run_id) == "done"
    assert runner.execute(run.run_id) is None, "the lapsed lease was taken over and used up"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]


def test_a_lease_handed_over_is_fenced_once_it_lapsed_and_another_took_the_run(
        store: Store, effects: Path, clock: ManualClock) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run, approval_id, digest = paused(runner)
    decided = runner.decide(approval_id, digest, APPROVER, True, drive=True)
    assert isinstance(decided, Decided) and decided.lease is not None
    clock.advance(seconds=31)
    assert store.hold(run.run_id, "recovery/elsewhere", LEASE)
    assert runner.execute(run.run_id) is None
    assert side_effects(effects) == []
    store.release(run.run_id, "recovery/elsewhere")
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]


def test_a_worker_with_people_to_tell_lets_go_only_after_telling_them(store: Store, effects: Path) -> None:
    """The approval is posted while the run is held, so no recovery can post it a second time."""
    told = Told()
    leases: list[str | None] = []
    runner = build_runner(store, effects, lease=30.0, notifier=told)
    original = told.approval_requested

    def approval_requested(run: RunRecord, approval: object, card: object) -> dict[str, str]:
        leases.append(store.get_run(run.run_id).lease_owner)
        return original(run, approval, card)

    told.approval_requested = approval_requested  # type: ignore[method-assign]
    run, approval_id, digest = paused(runner)
    assert leases and leases[0] is not None
    assert store.get_run(run.run_id).lease_owner is None
    decided = runner.decide(approval_id, digest, APPROVER, True, drive=True)
    assert isinstance(decided, Decided)
    assert runner.execute(run.run_id) == "done"
    finished = store.get_run(run.run_id)
    assert finished.lease_owner is None and store.run_notices(run.run_id) == []  # told, and nothing left owed
    assert told.of("run_finished") == [run.run_id]


def test_a_step_that_lets_go_keeps_the_lease_when_a_request_waits(store: Store) -> None:
    run = create(store)
    owner = "w1"
    assert store.claim(run.run_id, owner, LEASE) is not None
    saved = store.save_step(run.run_id, owner=owner, version=run.version,
                            checkpoint=lookup_step(run.state, "first"), write=StepWrite(), lease=LEASE, release=True)
    assert saved.released and store.get_run(run.run_id).lease_owner is None
    assert store.claim(run.run_id, owner, LEASE) is not None
    assert approval_commands.set_command(store, run.run_id, Cancel(by=REQUESTER, reason="stop").to_json(), CANCEL) is None
    again = store.get_run(run.run_id)
    kept = store.save_step(run.run_id, owner=owner, version=again.version,
                           checkpoint=lookup_step(again.state, "second"), write=StepWrite(), lease=LEASE, release=True)
    assert not kept.released and kept.command is not None
    assert store.get_run(run.run_id).lease_owner == owner, "the worker applies the request next, still holding the run"


def test_a_run_started_to_be_driven_is_held_by_its_starter_from_the_start(store: Store, effects: Path) -> None:
    runner, other = build_runner(store, effects, lease=30.0), build_runner(store, effects, lease=30.0)
    run = runner.start_run("tell Ana her refund is approved", REQUESTER, model="scripted:send", drive=True)
    assert run.lease_owner is not None and store.get_run(run.run_id).lease_owner == run.lease_owner
    assert other.execute(run.run_id) is None
    assert runner.execute(run.run_id) == "awaiting_approval"
    assert store.get_run(run.run_id).lease_owner is None


def test_a_lease_read_off_a_replayed_requests_run_is_not_driven_under(store: Store, effects: Path) -> None:
    """A replayed /signoff returns the run the first request started, held by whoever drives it
    now: its lease owner is that pass's, not the caller's, and two passes must never share one."""
    runner = build_runner(store, effects, lease=30.0)
    first = runner.start_run("tell Ana her refund is approved", REQUESTER, model="scripted:send",
                             request_id="trigger-1")
    assert store.claim(first.run_id, "replica-b/9a8b7c", LEASE) is not None
    again = runner.start_run("tell Ana her refund is approved", REQUESTER, model="scripted:send",
                             request_id="trigger-1", drive=True)
    assert again.run_id == first.run_id and again.lease_owner == "replica-b/9a8b7c"
    assert runner.execute(again.run_id) is None
    assert store.get_run(first.run_id).version == first.version, "nothing ran under the other pass's lease"
