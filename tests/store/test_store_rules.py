"""The rules the core hands the store (`runtime/rules.py`), as every adapter applies them: what a step
does to approvals and to a request left meanwhile, and which requests a run takes."""

from __future__ import annotations

from typing import Any

from store_harness import APPROVER, LEASE, REQUESTER, commit, create, step
from test_store_approvals import ARGS, approve, await_approval, pending_call

from signoff.runtime import approval_commands
from signoff.runtime.budget import Budget
from signoff.runtime.effects import AskAbout, CallChanged
from signoff.runtime.ports import Store
from signoff.runtime.records import RunRecord
from signoff.runtime.rules import CANCEL, EDIT, RETRY, CommandRule
from signoff.runtime.state import new_state

WHILE_WAITING = CommandRule(frozenset({"awaiting_approval"}))
"""A request the paused run takes (as Extend is taken by a run out of budget)."""


def paused_with_a_request(store: Store) -> dict[str, Any]:
    """A run waiting on an approval, with a request left for its worker, and that worker holding it."""
    await_approval(store)
    request = {"op": "extend", "limits": {}, "by": APPROVER}
    assert approval_commands.set_command(store, "run-a", request, WHILE_WAITING) is None
    store.claim("run-a", "w1", LEASE)
    return request


def test_a_step_that_ends_the_run_closes_its_approvals_and_refuses_the_waiting_request(store: Store) -> None:
    paused_with_a_request(store)
    run = store.get_run("run-a")
    saved = commit(store, "run-a", run.version,
                   step(run.state, {"role": "assistant", "step": 2, "final": "never mind"}, status="done"))
    assert saved.command is None
    assert [(a.key, a.status) for a in saved.cancelled] == [("run-a:1", "cancelled")]
    assert store.approval_for_key("run-a:1").status == "cancelled"
    store.release("run-a", "w1")
    assert store.get_run("run-a", history=False).command is None
    assert "run-a" not in store.runs_needing_work(), "an ended run is no work for anyone"
    [refused] = [e for e in store.timeline("run-a") if e["type"] == "command_refused"]
    assert (refused["op"], refused["reason"]) == ("extend", "the run already ended (done)")


def test_a_step_that_goes_on_hands_the_waiting_request_to_its_worker(store: Store) -> None:
    request = paused_with_a_request(store)
    run = store.get_run("run-a")
    saved = commit(store, "run-a", run.version,
                   step(run.state, {"role": "runtime", "step": 2, "error": "x"}, status="running"))
    assert (saved.command, saved.cancelled) == (request, [])
    assert store.get_run("run-a", history=False).command == request
    assert store.approval_for_key("run-a:1").status == "pending"


def test_a_reconsidered_call_supersedes_its_approval_and_asks_again_under_the_same_key(store: Store) -> None:
    first = await_approval(store)
    approve(store, first)
    store.claim("run-a", "w1", LEASE)
    run = store.get_run("run-a")
    again = step(run.state, events=[{"type": "call_reconsidered", "key": "run-a:1", "reason": "the tool changed"},
                                    {"type": "approval_requested", "key": "run-a:1", "supersedes": True}],
                 effects=(CallChanged("run-a:1"), AskAbout("run-a:1")),
                 status="awaiting_approval", pending={**pending_call("run-a", 1), "contract": "c2"})
    saved = commit(store, "run-a", run.version, again)
    assert [(a.approval_id, a.status) for a in saved.cancelled] == [(first.approval_id, "superseded")]
    [fresh] = saved.approvals
    assert (fresh.key, fresh.status, fresh.contract, fresh.args) == ("run-a:1", "pending", "c2", ARGS)
    assert store.approval_for_key("run-a:1") == fresh
    assert store.get_approval(first.approval_id).status == "superseded"


def test_cancel_closes_the_pending_approval_at_once(store: Store) -> None:
    approval = await_approval(store)
    assert approval_commands.set_command(store, "run-a", {"op": "cancel", "by": REQUESTER}, CANCEL) is None
    closed = store.get_approval(approval.approval_id)
    assert (closed.status, closed.decided_by) == ("cancelled", REQUESTER)
    assert store.timeline("run-a")[-1]["type"] == "command_recorded"


def test_an_edit_naming_another_runs_approval_is_refused_and_closes_nothing(store: Store) -> None:
    ours = await_approval(store, "run-a")
    theirs = await_approval(store, "run-b")
    edit = {"op": "edit", "by": APPROVER, "approval_id": theirs.approval_id, "digest": theirs.digest,
            "args": {**ARGS, "to": "mallory@example.com"}, "key": theirs.key}
    refusal = approval_commands.set_command(store, "run-a", edit, EDIT)
    assert refusal is not None and refusal.stale
    assert [store.get_approval(a.approval_id).status for a in (ours, theirs)] == ["pending", "pending"]
    assert [store.get_run(r, history=False).command for r in ("run-a", "run-b")] == [None, None]
    own = approval_commands.set_command(store, "run-a", {**edit, "approval_id": ours.approval_id,
                                                         "digest": ours.digest, "key": ours.key}, EDIT)
    assert own is None and store.get_approval(ours.approval_id).status == "superseded"


def test_a_request_the_status_does_not_take_changes_nothing(store: Store) -> None:
    approval = await_approval(store)
    refusal = approval_commands.set_command(store, "run-a", {"op": "retry", "by": APPROVER}, RETRY)
    assert refusal is not None and refusal.reason == "the run is awaiting_approval"
    assert store.get_run("run-a", history=False).command is None
    assert store.get_approval(approval.approval_id).status == "pending"
    assert approval_commands.set_command(store, "run-nope", {"op": "retry"}, RETRY).reason == "no such run"


def test_a_request_waits_behind_none_and_a_stale_message_is_refused(store: Store) -> None:
    paused_with_a_request(store)
    second = approval_commands.set_command(store, "run-a", {"op": "cancel", "by": REQUESTER}, CANCEL)
    assert second is not None and second.waiting is not None and second.waiting["op"] == "extend"
    assert "another request (extend)" in second.reason
    create(store, "run-b")
    version = store.get_run("run-b", history=False).version
    stale = approval_commands.set_command(store, "run-b", {"op": "cancel", "shown_version": version - 1}, CANCEL)
    assert stale is not None and stale.stale and "out of date" in stale.reason
    assert approval_commands.set_command(store, "run-b", {"op": "cancel", "shown_version": version}, CANCEL) is None
    made, _ = store.command_shown_at("run-b", version)
    assert made["op"] == "cancel"


def test_a_replayed_request_starts_nothing_new(store: Store) -> None:
    def start(run_id: str) -> RunRecord:
        return store.create_run(new_state(run_id, Budget().to_json()), goal="refund order A-1", requester=REQUESTER,
                                origin={}, model="scripted:send", request_id="trigger-1")

    first, replay = start("run-1"), start("run-2")
    assert replay.run_id == first.run_id == "run-1"
    assert [r.run_id for r in store.list_runs()] == ["run-1"]
    assert [e["type"] for e in store.timeline("run-1")] == ["run_created"]


def test_an_errand_holds_only_a_run_nobody_holds(store: Store) -> None:
    create(store)
    assert store.hold("run-a", "resync", LEASE)
    assert not store.hold("run-a", "resync", LEASE), "not even the same errand twice"
    assert store.claim("run-a", "w1", LEASE) is None
    store.release("run-a", "w1")  # another owner's release changes nothing
    assert store.get_run("run-a", history=False).lease_owner == "resync"
    store.release("run-a", "resync")
    assert store.get_run("run-a", history=False).lease_owner is None

