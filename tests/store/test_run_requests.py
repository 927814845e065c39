"""A person's request of a run (extend, retry, close, reconcile) is bound to the run as it was shown:
a replayed click, a double click or an old copy of the message changes nothing and says who acted."""

from __future__ import annotations

from pathlib import Path

from store_harness import APPROVER, REQUESTER, build_runner, side_effects

from signoff.runtime import approval_commands, starting_calls
from signoff.runtime.budget import Budget
from signoff.runtime.ports import Store
from signoff.runtime.records import AlreadyDone, Done, Refused
from signoff.runtime.rules import EXTEND_BUDGET
from signoff.runtime.runner import Runner

SECOND = "U_OTHER"


def out_of_budget(runner: Runner) -> str:
    run = runner.start_run("find the orders", REQUESTER, model="scripted:lookups", budget=Budget(max_steps=1))
    assert runner.execute(run.run_id) == "budget_exhausted"
    return run.run_id


def test_a_replayed_extend_extends_once(runner: Runner) -> None:
    run_id = out_of_budget(runner)
    shown = runner.get_run(run_id).version
    assert isinstance(runner.extend(run_id, APPROVER, shown_version=shown), Done)
    before_applied = runner.extend(run_id, APPROVER, shown_version=shown)  # the replay lands at once
    assert before_applied == AlreadyDone("extend", APPROVER)
    runner.execute(run_id)
    for _ in range(3):  # ... and after the worker applied the first
        replay = runner.extend(run_id, SECOND, shown_version=shown)
        assert isinstance(replay, AlreadyDone) and (replay.what, replay.by) == ("extend", APPROVER)
        assert replay.at is not None
    run = runner.get_run(run_id)
    assert run.budget["max_steps"] == 1 + runner.config.extend_steps
    assert [e["type"] for e in runner.timeline(run_id)].count("budget_extended") == 1


def test_an_old_copy_of_a_stopped_message_is_out_of_date(store: Store, effects: Path) -> None:
    """The run stopped, was extended, and stopped again: the first message's buttons are stale,
    and the new message's work."""
    runner = build_runner(store, effects, lease=30.0, extend_steps=1)
    run = runner.start_run("find the orders", REQUESTER, model="scripted:lookups", budget=Budget(max_steps=1))
    runner.execute(run.run_id)
    first = runner.get_run(run.run_id).version
    runner.extend(run.run_id, APPROVER, shown_version=first)
    assert runner.execute(run.run_id) == "budget_exhausted"  # one step more: out again before the answer
    second = runner.get_run(run.run_id).version
    old_close = runner.cancel(run.run_id, SECOND, "closed", shown_version=first)
    assert isinstance(old_close, AlreadyDone) and old_close.what == "extend"
    assert runner.get_run(run.run_id).status == "budget_exhausted"
    assert isinstance(runner.cancel(run.run_id, SECOND, "closed", shown_version=second), Done)


def test_a_button_for_a_state_nobody_acted_on_says_the_message_is_out_of_date(runner: Runner) -> None:
    run_id = out_of_budget(runner)
    run = runner.get_run(run_id)
    outcome = runner.retry(run_id, REQUESTER, shown_version=run.version - 1)
    assert isinstance(outcome, Refused) and "out of date" in outcome.reason


def test_a_replayed_reconcile_retry_runs_the_call_once(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0, failpoints="")
    run = runner.start_run("send it", REQUESTER, model="scripted:send")
    runner.execute(run.run_id)
    approval = runner.pending_approval(run.run_id)
    runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    # The call started and left no outcome (its worker died mid-call): the ledger says "started".
    store.claim(run.run_id, "dead", runner.config.lease)
    starting_calls.begin_execution(store, run.run_id, approval.tool, approval.args, approval.key, owner="dead",
                          lease=runner.config.lease, dispatch_window=runner.config.dispatch_window)
    store.release(run.run_id, "dead")
    assert runner.execute(run.run_id) == "needs_reconciliation"
    shown = runner.get_run(run.run_id).version
    assert isinstance(runner.reconcile(run.run_id, APPROVER, "retry", shown_version=shown), Done)
    assert runner.execute(run.run_id) == "done"
    for _ in range(3):
        replay = runner.reconcile(run.run_id, APPROVER, "retry", shown_version=shown)
        assert isinstance(replay, AlreadyDone) and replay.what == "reconcile.retry"
        runner.execute(run.run_id)
    assert len(side_effects(effects)) == 1


def test_a_stored_request_this_version_cannot_read_is_refused_audited_and_changes_nothing(runner: Runner) -> None:
    # Written by another version, or by hand: an extend whose limits are not numbers.
    run_id = out_of_budget(runner)
    before = runner.get_run(run_id)
    assert approval_commands.set_command(runner.store, run_id, {"op": "extend", "limits": {"max_steps": "lots"}, "by": APPROVER},
                                    EXTEND_BUDGET) is None
    assert runner.execute(run_id) == "budget_exhausted"
    after = runner.get_run(run_id)
    assert after.command is None and after.budget == before.budget
    [refused] = [e for e in runner.timeline(run_id) if e["type"] == "command_refused"]
    assert "malformed command 'extend'" in refused["reason"] and refused["by"] == APPROVER
