"""Several tool calls in one model turn, on every store: each call is validated and classified on
its own, gets its own key and its own approval, is decided in any order, and the model hears every
outcome, in the order it asked, once all are settled. A crash, a race or the same batch proposed
again never runs a call twice or without its approval."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from store_harness import (
    APPROVER,
    LOOKUP,
    REQUESTER,
    SCRIPTS,
    SEND,
    build_runner,
    scripted_policies,
    side_effects,
)

from signoff.runtime import approval_commands
from signoff.runtime.budget import Budget
from signoff.runtime.commands import Edit
from signoff.runtime.edits import checked_edit
from signoff.runtime.failpoints import FailpointHit
from signoff.runtime.models.scripted import ScriptedPolicy
from signoff.runtime.ports import Store
from signoff.runtime.records import AlreadyDecided, Decided, Done
from signoff.runtime.requests import waiting_on
from signoff.runtime.rules import EDIT
from signoff.runtime.runner import Runner
from signoff.runtime.state import parse_state


def paused(runner: Runner, model: str = "scripted:batch", **budget: Any) -> tuple[str, list[Any]]:
    run = runner.start_run("look up the orders and tell Ana and Bo", REQUESTER, model=model,
                           budget=Budget(**budget) if budget else None)
    assert runner.execute(run.run_id) == "awaiting_approval"
    return run.run_id, sorted(runner.store.list_approvals(status="pending", run_id=run.run_id), key=lambda a: a.key)


def tool_entries(runner: Runner, run_id: str) -> list[dict[str, Any]]:
    return [e for e in runner.get_run(run_id).state["history"] if e["role"] == "tool"]


def events_of(runner: Runner, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in runner.timeline(run_id) if e["type"] == kind]


def test_every_call_of_a_turn_is_judged_alone_and_the_model_hears_all_once_all_are_settled(
        store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run_id, (ana, bo) = paused(runner)
    assert (ana.key, bo.key) == (f"{run_id}:1.2", f"{run_id}:1.3")  # each its own key, from its place
    assert (ana.args["to"], bo.args["to"]) == ("ana@example.com", "bo@example.com")
    assert [e["key"] for e in events_of(runner, run_id, "approval_requested")] == [ana.key, bo.key]
    assert tool_entries(runner, run_id) == []  # the read ran, but the model hears nothing until all are settled
    assert side_effects(effects) == []

    # Bo's first, denied; Ana's after, approved: any order.
    assert isinstance(runner.decide(bo.approval_id, bo.digest, APPROVER, False, "not Bo"), Decided)
    assert runner.execute(run_id) == "awaiting_approval"
    assert tool_entries(runner, run_id) == []
    assert isinstance(runner.decide(ana.approval_id, ana.digest, APPROVER, True), Decided)
    assert runner.execute(run_id) == "done"
    assert side_effects(effects) == [(SEND, ana.key)]  # once, with its own key; Bo's never

    told = tool_entries(runner, run_id)
    assert [(e["call_id"], "result" if "result" in e else e["error_kind"]) for e in told] == [
        ("c-look", "result"), ("c-ana", "result"), ("c-bo", "denied"), ("c-none", "unknown_tool")]
    assert all(e["step"] == 1 for e in told)
    assert told[2]["error"] == "denied by human: not Bo"
    history = runner.get_run(run_id).state["history"]
    assert [e.get("call_id") for e in history if e["role"] == "assistant" and "tool" in e] == [
        "c-look", "c-ana", "c-bo", "c-none"]
    assert runner.get_run(run_id).state.get("batch") is None  # settled: nothing of the turn is left waiting


def test_an_approval_racing_a_deny_of_the_same_call_is_one_or_the_other(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run_id, (ana, bo) = paused(runner)
    barrier = threading.Barrier(2)

    def approve_all() -> None:
        barrier.wait()
        for approval in (ana, bo):
            runner.decide(approval.approval_id, approval.digest, APPROVER, True)

    def deny_bo() -> None:
        barrier.wait()
        runner.decide(bo.approval_id, bo.digest, "U_OTHER", False, "no")

    threads = [threading.Thread(target=approve_all), threading.Thread(target=deny_bo)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert runner.execute(run_id) == "done"
    bo_now = runner.get_approval(bo.approval_id)
    ran = side_effects(effects)
    assert (SEND, ana.key) in ran and ran.count((SEND, ana.key)) == 1
    assert ((SEND, bo.key) in ran) == (bo_now.status == "consumed")  # Bo's ran only if the approval won
    assert bo_now.status in ("consumed", "denied")


def test_a_crash_after_the_first_call_ran_runs_it_never_again(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=0.2)
    run_id, (ana, bo) = paused(runner)
    for approval in (ana, bo):
        assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    crashing = build_runner(store, effects, lease=0.2, failpoints="after_checkpoint=raise")
    with pytest.raises(FailpointHit):  # Ana's email ran and its outcome was committed; then the worker died
        crashing.execute(run_id)
    assert side_effects(effects) == [(SEND, ana.key)]
    recovered = build_runner(store, effects, lease=0.2)
    time.sleep(0.3)  # the dead worker's lease runs out
    assert run_id in recovered.recover(min_age=timedelta(0))
    assert recovered.execute(run_id) == "done"
    assert sorted(side_effects(effects)) == sorted([(SEND, ana.key), (SEND, bo.key)])  # each once
    assert [e["call_id"] for e in tool_entries(recovered, run_id)] == ["c-look", "c-ana", "c-bo", "c-none"]


def test_the_same_batch_proposed_again_runs_no_side_effect_twice(store: Store, effects: Path) -> None:
    turn = SCRIPTS["scripted:batch"][0]
    policies = {"scripted:twice": [turn, turn, {"final": "done"}]}
    runner = build_runner(store, effects, lease=30.0, policies=lambda model: (
        ScriptedPolicy(policies[model], name=model) if model in policies else scripted_policies(model)))
    run_id, approvals = paused(runner, "scripted:twice")
    for approval in approvals:
        runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    assert runner.execute(run_id) == "done"  # the second turn asks nobody: its emails are refused as repeats
    assert len(side_effects(effects)) == 2
    second = [e for e in tool_entries(runner, run_id) if e["step"] == 2]
    assert [(e["call_id"], e.get("error_kind")) for e in second] == [
        ("c-look", None), ("c-ana", "duplicate"), ("c-bo", "duplicate"), ("c-none", "unknown_tool")]


def test_a_batch_beyond_the_tool_call_budget_makes_only_what_the_budget_allows(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run_id, approvals = paused(runner, max_steps=5, max_tool_calls=2)
    assert [a.args["to"] for a in approvals] == ["ana@example.com"]  # the lookup and Ana's; Bo's is over budget
    runner.decide(approvals[0].approval_id, approvals[0].digest, APPROVER, True)
    runner.execute(run_id)
    told = {e["call_id"]: e for e in tool_entries(runner, run_id)}
    assert "tool calls is used up" in told["c-bo"]["error"]
    assert len(side_effects(effects)) == 1


def test_a_call_nobody_decides_in_time_is_told_as_a_timeout_and_the_turn_goes_on(
        store: Store, effects: Path, clock: Any) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run_id, (ana, bo) = paused(runner)
    assert isinstance(runner.decide(ana.approval_id, ana.digest, APPROVER, True), Decided)
    assert runner.execute(run_id) == "awaiting_approval"
    clock.advance(minutes=31)
    assert [a.approval_id for a in runner.expire_due()] == [bo.approval_id]
    run = runner.get_run(run_id)
    assert run.status == "done"  # one call's expiry never ends a turn whose other calls ran
    told = {e["call_id"]: e for e in tool_entries(runner, run_id)}
    assert told["c-bo"]["error_kind"] == "unanswered" and "denied" not in told["c-bo"]["error"]
    assert side_effects(effects) == [(SEND, ana.key)]


def test_cancelling_a_batch_closes_every_approval_and_keeps_what_ran(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run_id, (ana, bo) = paused(runner)
    assert isinstance(runner.decide(ana.approval_id, ana.digest, APPROVER, True), Decided)
    runner.execute(run_id)
    assert isinstance(runner.cancel(run_id, REQUESTER, "enough"), Done)
    assert runner.execute(run_id) == "cancelled"
    assert runner.get_approval(bo.approval_id).status == "cancelled"
    late = runner.decide(bo.approval_id, bo.digest, APPROVER, True)
    assert isinstance(late, AlreadyDecided) and side_effects(effects) == [(SEND, ana.key)]
    told = {e["call_id"]: e for e in tool_entries(runner, run_id)}
    assert "result" in told["c-ana"] and told["c-bo"]["error_kind"] == "refused"


def test_a_read_in_a_batch_runs_even_when_every_other_call_asks(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run_id, _ = paused(runner)
    executed = [e for e in events_of(runner, run_id, "tool_executed") if e["tool"] == LOOKUP]
    assert len(executed) == 1 and executed[0]["key"] == f"{run_id}:1.1"


def test_a_turn_ended_by_a_call_that_could_not_start_in_time_keeps_nothing_to_request_again(
        store: Store, effects: Path, clock: Any) -> None:
    runner = build_runner(store, effects, lease=30.0)
    run_id, (ana, bo) = paused(runner)
    assert isinstance(runner.decide(bo.approval_id, bo.digest, APPROVER, True), Decided)
    clock.advance(minutes=11)  # approved, but past the dispatch window before a worker took it
    assert runner.execute(run_id) == "expired"
    run = runner.get_run(run_id)
    assert run.state["pending"] is None and run.state.get("batch") is None
    assert side_effects(effects) == []
    told = {e["call_id"]: e for e in tool_entries(runner, run_id)}
    assert set(told) == {"c-look", "c-ana", "c-bo", "c-none"}  # every call of the turn has its one outcome
    assert not isinstance(runner.request_again(run_id, REQUESTER), Done)


def test_an_edit_refused_once_it_reaches_the_run_asks_again_about_the_call_it_closed_instead_of_stranding_it(
        store: Store, effects: Path) -> None:
    """An edit left for the run closes its call's approval at once (no late click approves the old
    arguments); the run's worker may still refuse it, its check made on the run as it is by then
    (here: Bo's email edited into Ana's, beside hers in the turn, left as a form whose check ran
    while the run was between two steps). The call is then asked about again as it stands: before,
    the run waited on a call that had no approval left to decide, for good."""
    runner = build_runner(store, effects, lease=30.0)
    run_id, (ana, bo) = paused(runner)
    edit = Edit(approval_id=bo.approval_id, digest=bo.digest, args={**bo.args, "to": "ana@example.com"}, key=bo.key,
                by=APPROVER)
    assert approval_commands.set_command(store, run_id, edit.to_json(), EDIT) is None
    assert runner.get_approval(bo.approval_id).status == "superseded"
    assert runner.execute(run_id) == "awaiting_approval"
    [again] = [a for a in store.list_approvals(status="pending", run_id=run_id) if a.key == bo.key]
    assert again.args == bo.args and again.approval_id != bo.approval_id  # Bo's email, as it was, asked again
    asked = events_of(runner, run_id, "approval_requested")[-1]
    assert asked["key"] == bo.key and "would repeat" in asked["edit_refused"]  # why, in the same write
    for approval in (ana, again):
        assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    assert runner.execute(run_id) == "done"
    assert sorted(key for _, key in side_effects(effects)) == [ana.key, bo.key]


def test_an_edit_checked_while_the_turn_is_between_two_steps_is_checked_against_its_call(
        store: Store, effects: Path) -> None:
    """The edit form checks the edit against the call it edits (a repeat of another call of the
    turn is refused in the form), even while the run is between two of the turn's steps, running:
    before, it checked only the arguments then, and left the repeat for the run to refuse."""
    runner = build_runner(store, effects, lease=30.0)
    run_id, (_, bo) = paused(runner)
    between = parse_state(runner.get_run(run_id).state)[0].evolved(status="running", pending=None)
    call = waiting_on(between, bo.key)
    assert call is not None and call.key == bo.key
    with pytest.raises(ValueError, match="would repeat"):
        checked_edit(between, call, runner.tools[SEND], {**bo.args, "to": "ana@example.com"})
