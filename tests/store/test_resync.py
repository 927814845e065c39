"""Slack in line with the database: what a failed message left wrong, recovery puts right."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from store_harness import APPROVER, REQUESTER, ManualClock, Told, build_runner, set_state

from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.failpoints import FailpointHit
from signoff.runtime.ports import Store
from signoff.runtime.records import Decided, RunRecord
from signoff.runtime.relay import FENCE
from signoff.runtime.run_notices import REPOST_AFTER


class Flaky(Told):
    """A notifier whose named methods fail while `down` holds them."""

    def __init__(self) -> None:
        super().__init__()
        self.down: set[str] = set()

    def __getattribute__(self, name: str) -> Any:
        if name in object.__getattribute__(self, "down"):
            raise ConnectionError(f"slack is down ({name})")
        return object.__getattribute__(self, name)


def paused_run(runner, told) -> tuple[RunRecord, Any]:
    run = runner.start_run("tell Ana her refund is approved", REQUESTER)
    assert runner.execute(run.run_id) == "awaiting_approval"
    return run, runner.pending_approval(run.run_id)


def test_a_decision_whose_message_update_failed_is_shown_by_recovery(store: Store, effects: Path,
                                                                     clock: ManualClock) -> None:
    told = Flaky()
    runner = build_runner(store, effects, notifier=told, lease=30.0)
    run, approval = paused_run(runner, told)
    told.down.add("approval_decided")
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    assert told.of("approval_decided") == []  # the buttons are still live

    told.down.clear()
    runner.recover(min_age=timedelta(0))
    assert told.of("approval_decided") == [], "not before its backoff"
    clock.advance(seconds=10)
    runner.recover()
    assert told.of("approval_decided") == [approval.approval_id]
    assert store.take_notices(FENCE) == []
    clock.advance(minutes=10)
    runner.recover()
    assert told.of("approval_decided") == [approval.approval_id], "in line now: nothing more to update"


def test_an_ending_nobody_heard_of_is_told_once_by_recovery(store: Store, effects: Path,
                                                             clock: ManualClock) -> None:
    told = Flaky()
    runner = build_runner(store, effects, notifier=told, lease=30.0)
    run, approval = paused_run(runner, told)
    runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    told.down.add("run_finished")
    assert runner.execute(run.run_id) == "done"
    assert told.of("run_finished") == []

    told.down.clear()
    runner.recover()
    assert told.of("run_finished") == [], "not before its backoff, nor before recovery's wait"
    clock.advance(seconds=11)
    runner.recover()
    runner.recover()
    assert told.of("run_finished") == [run.run_id]
    assert store.run_notices(run.run_id) == [] and store.get_run(run.run_id, history=False).lease_owner is None


def test_an_ending_told_by_the_worker_leaves_nothing_owed_and_is_not_told_again(store: Store, effects: Path,
                                                                                clock: ManualClock) -> None:
    told = Told()
    runner = build_runner(store, effects, notifier=told, lease=30.0)
    run, approval = paused_run(runner, told)
    runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    assert runner.execute(run.run_id) == "done"
    stored = store.get_run(run.run_id, history=False)
    assert (store.run_notices(run.run_id), stored.lease_owner) == ([], None)
    clock.advance(minutes=10)
    runner.recover()
    assert told.of("run_finished") == [run.run_id]


def test_what_a_worker_that_died_before_telling_owed_is_told_by_recovery_in_order(store: Store, effects: Path,
                                                                                   clock: ManualClock) -> None:
    """A worker dies between saving a step and telling anyone of it: its call's result and the card
    the step asks for were lost for good before; recovery tells both, the result first, once."""
    told = Told()
    runner = build_runner(store, effects, notifier=told, lease=1.0)
    run = runner.start_run("look it up, then tell Ana", REQUESTER, model="scripted:lookup-then-send")
    dying = build_runner(store, effects, notifier=Told(), lease=1.0, failpoints="after_checkpoint=raise")
    with pytest.raises(FailpointHit):
        dying.execute(run.run_id)
    clock.advance(seconds=2)  # its lease has run out
    for run_id in runner.recover():
        runner.execute(run_id)
    shown = [method for method, _ in told.calls if method in ("tool_result", "approval_requested")]
    assert shown[:1] == ["tool_result"] and shown.count("approval_requested") == 1
    runner.recover()
    assert [method for method, _ in told.calls].count("approval_requested") == 1


def test_a_click_between_posting_and_recording_the_message_is_shown(store: Store, effects: Path,
                                                                    clock: ManualClock) -> None:
    told = Told()
    runner = build_runner(store, effects, notifier=told, lease=30.0)
    clicked: list[Any] = []

    def post_then_someone_clicks(run: RunRecord, approval: Any, card: Any) -> dict[str, Any]:
        clicked.append(runner.decide(approval.approval_id, approval.digest, APPROVER, False, "not now"))
        return {"channel": "C1", "ts": "9.0"}

    told.approval_requested = post_then_someone_clicks  # type: ignore[method-assign]  # a slow Slack
    run, _ = paused_run(runner, told)
    assert isinstance(clicked[0], Decided)
    approval = clicked[0].approval
    assert told.of("approval_decided")[-1] == approval.approval_id
    clock.advance(minutes=10)  # the redraw its decision owes waited for the card's place; it is drawn again
    runner.recover()
    assert told.of("approval_decided")[-1] == approval.approval_id and store.take_notices(FENCE) == []


def test_an_ending_without_any_approval_is_told_by_recovery(store: Store, effects: Path,
                                                            clock: ManualClock) -> None:
    told = Flaky()
    runner = build_runner(store, effects, notifier=told, lease=30.0)
    run = runner.start_run("look it up", REQUESTER, model="scripted:lookups")
    told.down.add("run_finished")
    assert runner.execute(run.run_id) == "done"
    told.down.clear()
    clock.advance(seconds=11)
    runner.recover()
    assert told.of("run_finished") == [run.run_id]


def test_one_unreadable_run_hides_no_other_run_from_recovery_or_lists(sql_store: SqlStore, effects: Path,
                                                                      clock: ManualClock) -> None:
    store = sql_store
    told = Flaky()
    runner = build_runner(store, effects, notifier=told, lease=30.0)
    told.down.add("approval_requested")
    damaged, damaged_approval = paused_run(runner, told)
    healthy, healthy_approval = paused_run(runner, told)
    set_state(store.engine, damaged.run_id, '{"schema_version": 1, "status": "awaiti')
    told.down.clear()
    clock.advance(seconds=30)  # a failed card is posted again no sooner (it may be on its way)

    runner.recover(min_age=timedelta(0))  # used to raise at the damaged run and post nothing
    assert told.of("approval_requested") == [healthy_approval.approval_id]
    assert store.get_approval(healthy_approval.approval_id).message is not None

    listed = {run.run_id: run for run in runner.runs_for(REQUESTER)}
    assert set(listed) == {damaged.run_id, healthy.run_id}
    assert "not valid JSON" in (listed[damaged.run_id].unreadable or "")
    assert listed[healthy.run_id].unreadable is None and listed[healthy.run_id].state["steps"] == 1
    assert [a.approval_id for a in runner.approvals_for(APPROVER)] == [healthy_approval.approval_id]
    with pytest.raises(IncompatibleState):  # nothing acts on it: a person has to look
        store.get_run(damaged.run_id)
    assert damaged_approval.approval_id not in told.of("approval_requested")


class Stalled(Told):
    """A notifier whose `method` blocks, as a slow Slack would, until `go` is set."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.entered, self.go = threading.Event(), threading.Event()
        real = getattr(self, method)

        def stalled(*args: Any) -> Any:
            self.entered.set()
            assert self.go.wait(10)
            return real(*args)

        setattr(self, method, stalled)


@pytest.mark.parametrize("method", ["approval_requested", "run_finished"])
def test_two_replicas_recovering_at_once_post_a_lost_message_once(store: Store, effects: Path,
                                                                  clock: ManualClock, method: str) -> None:
    told = Flaky()
    first = build_runner(store, effects, notifier=told, lease=30.0)
    told.down.add(method)
    run, approval = paused_run(first, told)
    if method == "run_finished":
        first.decide(approval.approval_id, approval.digest, APPROVER, True)
        assert first.execute(run.run_id) == "done"
    clock.advance(seconds=30)
    slow, quick = Stalled(method), Told()
    replica_a = build_runner(store, effects, notifier=slow, lease=30.0, worker_id="replica-a")
    replica_b = build_runner(store, effects, notifier=quick, lease=30.0, worker_id="replica-b")

    posting = threading.Thread(target=replica_a.recover, kwargs={"min_age": timedelta(0)})
    posting.start()
    assert slow.entered.wait(10)
    replica_b.recover(min_age=timedelta(0))  # while replica A is still posting
    slow.go.set()
    posting.join(10)
    replica_b.recover(min_age=timedelta(0))  # and after it has

    subject = approval.approval_id if method == "approval_requested" else run.run_id
    assert (slow.of(method), quick.of(method)) == ([subject], [])


class LoseTheRecordOfAPost:
    """The database fails right after Slack took a card: the statement recording where it was posted
    meets a dead connection (closed on SQLite, terminated on PostgreSQL), once."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.fired = engine, False

    def __call__(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if self.fired or not statement.startswith("UPDATE approvals SET message"):
            return
        self.fired = True
        dbapi = conn.connection.dbapi_connection
        if self.engine.dialect.name == "postgresql":
            with self.engine.connect() as other:
                other.exec_driver_sql(f"SELECT pg_terminate_backend({dbapi.info.backend_pid}, 5000)")
        else:
            dbapi.close()

    def __enter__(self) -> LoseTheRecordOfAPost:
        event.listen(self.engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self)


def test_a_card_whose_place_the_database_lost_is_recorded_by_recovery_not_posted_twice(
        sql_store: SqlStore, effects: Path) -> None:
    store = sql_store
    told = Told()
    runner = build_runner(store, effects, notifier=told, lease=30.0)
    run = runner.start_run("tell Ana her refund is approved", REQUESTER)
    with LoseTheRecordOfAPost(store.engine) as lost, pytest.raises(DBAPIError):
        runner.execute(run.run_id)
    assert lost.fired
    [approval] = store.list_approvals(run_id=run.run_id)
    assert approval.message is None and told.of("approval_requested") == [approval.approval_id]
    runner.recover(min_age=timedelta(0))
    assert told.of("approval_requested") == [approval.approval_id], "one card, not a second one"
    assert store.get_approval(approval.approval_id).message == {"channel": "C1", "ts": "2.0"}
    runner.recover(min_age=timedelta(0))
    assert told.of("approval_requested") == [approval.approval_id]



def test_a_card_whose_place_the_database_lost_is_not_posted_again_by_another_replica(
        sql_store: SqlStore, effects: Path, clock: ManualClock) -> None:
    """The database dies after Slack took a card and before its place is recorded; the run's lease
    is free again at once. Another replica, which cannot know of the card, leaves its post alone
    (it is fenced from before it was made), and the replica that posted it records where it went."""
    store = sql_store
    poster_slack, other_slack = Told(), Told()
    poster = build_runner(store, effects, notifier=poster_slack, lease=30.0, worker_id="replica-a")
    other = build_runner(store, effects, notifier=other_slack, lease=30.0, worker_id="replica-b")
    run = poster.start_run("tell Ana her refund is approved", REQUESTER)
    with LoseTheRecordOfAPost(store.engine), pytest.raises(DBAPIError):
        poster.execute(run.run_id)
    [approval] = store.list_approvals(run_id=run.run_id)
    assert store.get_run(run.run_id).lease_owner is None
    clock.advance(seconds=1)
    other.recover(min_age=timedelta(0))
    assert other_slack.of("approval_requested") == [], "a second card, beside the first one's live buttons"
    poster.recover(min_age=timedelta(0))
    assert store.get_approval(approval.approval_id).message == {"channel": "C1", "ts": "2.0"}
    clock.advance(seconds=REPOST_AFTER.total_seconds())
    other.recover(min_age=timedelta(0))  # the fence passed: its notice is found told already
    assert (poster_slack.of("approval_requested"), other_slack.of("approval_requested")) == ([approval.approval_id], [])
    assert store.run_notices(run.run_id) == []


class FailsFirstResult(Told):
    """A notifier whose first `tool_result` fails, as a Slack hiccup would; it records each result's step."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def tool_result(self, run: RunRecord, entry: dict[str, Any], grant: Any) -> None:
        if not self.failed:
            self.failed = True
            raise ConnectionError("slack is down (tool_result)")
        self.calls.append(("tool_result", f"step {entry['step']}"))


def test_a_message_slack_refused_holds_back_the_runs_later_ones_until_it_is_told(store: Store, effects: Path,
                                                                                  clock: ManualClock) -> None:
    """A run's messages are told in the order they were owed: the results after one Slack refused,
    and the run's ending, wait for it, and are told after it, each once."""
    told = FailsFirstResult()
    runner = build_runner(store, effects, notifier=told, lease=30.0)
    run = runner.start_run("look it up", REQUESTER, model="scripted:lookups")
    assert runner.execute(run.run_id) == "done"
    assert [m for m, _ in told.calls if m in ("tool_result", "run_finished")] == []  # all held back
    clock.advance(seconds=11)
    runner.recover()
    shown = [(m, s) for m, s in told.calls if m in ("tool_result", "run_finished")]
    assert shown == [("tool_result", "step 1"), ("tool_result", "step 2"), ("tool_result", "step 3"),
                     ("run_finished", run.run_id)]
    runner.recover()
    assert [(m, s) for m, s in told.calls if m in ("tool_result", "run_finished")] == shown
