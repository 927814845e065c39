"""The store's contract, on every adapter: runs, appended history, audit events, optimistic concurrency
and leases. (How SQL lays the history out in rows is checked in test_sql_rows.py.)"""

from __future__ import annotations

import pytest
from store_harness import LEASE, REQUESTER, ManualClock, create, lookup_step, save, snapshot, step

from signoff.runtime import approval_commands
from signoff.runtime.effects import AskAbout
from signoff.runtime.errors import Conflict
from signoff.runtime.ports import Store
from signoff.runtime.rules import CANCEL


def test_a_created_run_reads_back_with_its_row_and_state(store: Store) -> None:
    created = create(store)
    run = store.get_run("run-a")
    assert run == created
    assert (run.goal, run.requester, run.origin, run.model) == ("refund order A-1", REQUESTER, {"channel": "C1"},
                                                               "scripted:send")
    assert (run.status, run.version, run.state["history"], run.lease_owner) == ("idle", 1, [], None)
    assert store.get_run("run-missing") is None
    assert [e["type"] for e in store.timeline("run-a")] == ["run_created"]


def test_each_step_appends_its_history_and_the_run_reads_back_whole(store: Store) -> None:
    create(store)
    store.claim("run-a", "w1", LEASE)
    state, version = store.get_run("run-a").state, 1
    for i in range(3):
        checkpoint = lookup_step(state, f"marker-{i}")
        version = save(store, "run-a", version, checkpoint)
        state = checkpoint.state
        assert len(store.get_run("run-a").state["history"]) == 2 * (i + 1)
        assert store.get_run("run-a", history=False).state["history"] == []
    run = store.get_run("run-a")
    assert run.state["history"] == state["history"]
    assert (run.version, run.state["steps"]) == (4, 3)


def test_what_the_store_hands_out_is_a_copy(store: Store) -> None:
    """A caller changing a run or an approval it read changes nothing stored."""
    created = create(store)
    created.state["history"].append({"role": "user", "content": "sneaked in"})
    created.origin["channel"] = "C_OTHER"
    run = store.get_run("run-a")
    assert (run.state["history"], run.origin) == ([], {"channel": "C1"})


def test_events_commit_with_the_step_and_are_numbered_1_to_n_per_run(store: Store) -> None:
    for run_id in ("run-a", "run-b"):
        create(store, run_id)
        store.claim(run_id, "w1", LEASE)
    states = {r: (store.get_run(r).state, 1) for r in ("run-a", "run-b")}
    for n_events in (2, 1, 3):
        for run_id, (state, version) in states.items():
            checkpoint = step(state, events=[{"type": "decision", "i": i} for i in range(n_events)])
            states[run_id] = (checkpoint.state, save(store, run_id, version, checkpoint))
    store.append_event("run-a", {"type": "notify_failed", "method": "run_started"})
    approval_commands.set_command(store, "run-b", {"op": "cancel", "by": "U_LEAD"}, CANCEL)
    for run_id in ("run-a", "run-b"):
        timeline = store.timeline(run_id)
        assert [e["seq"] for e in timeline] == list(range(1, len(timeline) + 1))
        assert len(timeline) == 1 + 2 + 1 + 3 + 1
    assert store.timeline("run-a")[-1]["type"] == "notify_failed"
    assert store.timeline("run-b")[-1]["type"] == "command_recorded"


def test_a_stale_version_conflicts_and_writes_nothing(store: Store) -> None:
    create(store)
    store.claim("run-a", "w1", LEASE)
    state = store.get_run("run-a").state
    first = lookup_step(state, "first")
    assert save(store, "run-a", 1, first) == 2
    before = snapshot(store, "run-a")
    pending = {"tool": "send_email", "args": {"to": "x@example.com"}, "key": "run-a:1", "step": 1, "call_id": "c1"}
    stale = step(state, {"role": "assistant", "step": 1, "tool": "send_email", "args": pending["args"],
                         "call_id": "c1"},
                 events=[{"type": "approval_requested", "key": "run-a:1"}], effects=(AskAbout("run-a:1"),),
                 status="awaiting_approval",
                 pending=pending)
    with pytest.raises(Conflict):
        save(store, "run-a", 1, stale)
    assert snapshot(store, "run-a") == before
    assert store.approval_for_key("run-a:1") is None


def test_a_writer_that_lost_its_lease_conflicts(store: Store, clock: ManualClock) -> None:
    create(store)
    store.claim("run-a", "w1", LEASE)
    clock.advance(seconds=31)
    assert store.claim("run-a", "w2", LEASE) is not None
    with pytest.raises(Conflict):
        save(store, "run-a", 1, lookup_step(store.get_run("run-a").state, "late"), owner="w1")
    assert store.get_run("run-a").version == 1


def test_lease_claim_renew_release(store: Store, clock: ManualClock) -> None:
    create(store)
    claimed = store.claim("run-a", "w1", LEASE)
    assert (claimed.lease_owner, claimed.lease_expires_at) == ("w1", clock.now + LEASE)
    assert store.claim("run-a", "w2", LEASE) is None
    assert store.claim("run-a", "w1", LEASE) is not None, "the holder may claim again"

    clock.advance(seconds=20)
    assert store.renew("run-a", "w1", LEASE)
    clock.advance(seconds=20)  # past the first expiry, inside the renewed one
    assert store.claim("run-a", "w2", LEASE) is None

    clock.advance(seconds=11)
    taken = store.claim("run-a", "w2", LEASE)
    assert taken is not None and taken.lease_owner == "w2"
    assert not store.renew("run-a", "w1", LEASE)
    store.release("run-a", "w1")  # not the holder: nothing happens
    assert store.get_run("run-a").lease_owner == "w2"

    store.release("run-a", "w2")
    assert store.get_run("run-a").lease_owner is None
    assert store.claim("run-a", "w3", LEASE).lease_owner == "w3"


def test_nobody_claims_a_finished_or_unknown_run(store: Store) -> None:
    create(store)
    store.claim("run-a", "w1", LEASE)
    save(store, "run-a", 1, step(store.get_run("run-a").state, status="done"))
    store.release("run-a", "w1")
    assert store.claim("run-a", "w2", LEASE) is None
    assert store.claim("run-nope", "w2", LEASE) is None


def test_queries_list_runs_by_status_and_requester(store: Store, clock: ManualClock) -> None:
    for run_id in ("run-a", "run-b"):
        create(store, run_id)
        clock.advance(seconds=1)
    store.claim("run-b", "w1", LEASE)
    save(store, "run-b", 1, step(store.get_run("run-b").state, status="done"))
    assert [r.run_id for r in store.list_runs(requester=REQUESTER)] == ["run-b", "run-a"]
    assert [r.run_id for r in store.list_runs(status="idle")] == ["run-a"]
    assert store.list_runs(requester="U_OTHER") == []
    assert store.count_runs() == {"idle": 1, "done": 1}


def test_lists_runs_that_asked_about_a_tool(store: Store) -> None:
    for run_id in ("run-a", "run-b"):
        create(store, run_id)
    store.claim("run-b", "w1", LEASE)
    state = store.get_run("run-b").state
    pending = {"tool": "send_email", "args": {"to": "x@example.com"}, "key": "run-b:1", "step": 1, "call_id": "c1"}
    save(store, "run-b", 1, step(state, {"role": "assistant", "step": 1, "tool": "send_email", "args": pending["args"],
                                         "call_id": "c1"},
                                 events=[{"type": "approval_requested", "key": "run-b:1"}],
                                 effects=(AskAbout("run-b:1"),), status="awaiting_approval", pending=pending))
    assert [r.run_id for r in store.list_runs(tool="send_email")] == ["run-b"]
    assert store.list_runs(tool="restart_service") == []


def test_pages_of_runs_cover_each_run_once_even_when_made_at_the_same_moment(store: Store, clock: ManualClock) -> None:
    made = []
    for number in range(7):
        made.append(create(store, f"run-{number}").run_id)
        if number % 3 == 2:
            clock.advance(seconds=1)  # runs 0-2 share a moment, as do 3-5
    pages, older_than = [], None
    while page := [r.run_id for r in store.list_runs(older_than=older_than, limit=2)]:
        pages.append(page)
        older_than = page[-1]
    listed = [run_id for page in pages for run_id in page]
    assert sorted(listed) == sorted(made) and len(listed) == len(set(listed))
    assert listed[0] == "run-6" and listed == [r.run_id for r in store.list_runs(limit=100)]
    assert store.list_runs(older_than="run-nope") == []


def test_a_run_read_with_its_history_carries_the_typed_state_it_was_checked_as(store: Store) -> None:
    """What a worker resumes from, so that a long run's history is checked once per load, not twice."""
    run = create(store)
    assert store.claim(run.run_id, "w1", LEASE) is not None
    version = save(store, run.run_id, run.version, lookup_step(run.state, "first"))
    read = store.get_run(run.run_id)
    assert read is not None and read.version == version and read.checked is not None
    assert read.checked.to_json() == read.state
    assert [entry.role for entry in read.checked.history] == [entry["role"] for entry in read.state["history"]]
    bare = store.get_run(run.run_id, history=False)
    assert bare is not None and bare.checked is None, "a row read without its history was checked as nothing"
