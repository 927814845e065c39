"""The audit webhook delivers, on SQLite and PostgreSQL: every event written after it was configured,
once each (again only under the same `id`), in order, signed as the docs' receiver checks, through a
receiver outage, a restart and two replicas at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, insert, select, update
from store_harness import create

from signoff.runtime.adapters.audit_cursor import SqlAuditCursor
from signoff.runtime.adapters.audit_delivery import Webhook, WebhookDeliverer
from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import audit_webhook, events
from signoff.runtime.audit_webhook import CONTENT_TYPE, target_of
from tests.fakes.receiver import WebhookReceiver, documented_recipe, wait_for

SECRET = "whsec-test-0123456789"


class Ticks:
    """A monotonic clock moved by hand: backoff and gap waits pass when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as receiver:
        yield receiver


def deliverer(engine: Engine, url: str, owner: str = "replica-1", *, clock: Ticks | None = None,
              lease: float = 30.0) -> WebhookDeliverer:
    webhook = Webhook(url, SECRET, lease=timedelta(seconds=lease), gap_wait=5.0, timeout=5.0)
    return WebhookDeliverer(SqlAuditCursor(engine), webhook, owner=owner, clock=clock or Ticks())


def note(store: SqlStore, run_id: str, n: int) -> None:
    for i in range(n):
        store.append_event(run_id, {"type": "note_added", "text": f"note {i}"})


def ids(receiver: WebhookReceiver) -> list[str]:
    return [d.event["id"] for d in receiver.taken()]


def written_after(engine: Engine, through: int) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(select(events.c.run_id, events.c.seq).where(events.c.id > through)
                            .order_by(events.c.id)).all()
    return [f"{run_id}:{seq}" for run_id, seq in rows]


def test_events_written_before_the_webhook_is_configured_are_not_sent(engine: Engine, receiver: WebhookReceiver):
    store = SqlStore(engine)
    create(store, "run-old")
    note(store, "run-old", 3)
    stream = deliverer(engine, receiver.url)
    assert stream.deliver_due() == 0  # the cursor starts at the log's end
    note(store, "run-old", 2)
    create(store, "run-new")

    stream.deliver_due()

    assert ids(receiver) == ["run-old:5", "run-old:6", "run-new:1"]


def test_every_event_arrives_signed_as_the_docs_receiver_checks(engine: Engine, receiver: WebhookReceiver):
    store = SqlStore(engine)
    stream = deliverer(engine, receiver.url)
    stream.deliver_due()
    create(store, "run-a")
    stream.deliver_due()

    [delivery] = receiver.taken()
    recipe = documented_recipe()
    assert recipe["verified"](SECRET, delivery.signature, delivery.body)
    assert not recipe["verified"]("another secret", delivery.signature, delivery.body)
    assert not recipe["verified"](SECRET, delivery.signature, delivery.body.replace(b"run-a", b"run-b"))
    signed_at = int(delivery.signature.split(",")[0].removeprefix("t="))
    assert not recipe["verified"](SECRET, delivery.signature, delivery.body, now=signed_at + 301)  # a replay
    event = delivery.event
    assert delivery.content_type == CONTENT_TYPE
    assert {k: event[k] for k in ("specversion", "id", "type", "datacontenttype")} == {
        "specversion": "1.0", "id": "run-a:1", "type": "dev.signoff.run_created", "datacontenttype": "application/json"}
    assert event["source"].startswith("urn:uuid:") and event["time"] == event["data"]["at"]
    assert event["data"]["record"] == "event" and len(event["data"]["hash"]) == 64


def test_a_receiver_down_then_up_across_a_restart_gets_every_event_once_in_order(
        engine: Engine, database_url: str, receiver: WebhookReceiver):
    store, ticks = SqlStore(engine), Ticks()
    first = deliverer(engine, receiver.url, "replica-1", clock=ticks, lease=0.5)
    first.deliver_due()
    start = first.cursor.status().through  # type: ignore[union-attr]
    receiver.down = True
    create(store, "run-a")
    note(store, "run-a", 2)
    for _ in range(3):
        ticks.now += 60  # past each backoff
        first.deliver_due()
    assert receiver.refused() == 3 and receiver.taken() == []
    create(store, "run-b")  # written while Signoff is down too

    restarted = make_engine(database_url)  # a new process: its own engine, owner and clock
    try:
        receiver.down = False
        second = deliverer(restarted, receiver.url, "replica-2")
        wait_for(lambda: second.deliver_due() >= 0 and len(receiver.taken()) == 4, what="the events after the lease lapsed")
        note(SqlStore(restarted), "run-b", 1)
        second.deliver_due()
    finally:
        restarted.dispose()

    assert ids(receiver) == written_after(engine, start) == ["run-a:1", "run-a:2", "run-a:3", "run-b:1", "run-b:2"]
    assert {d.event["id"] for d in receiver.deliveries} == set(ids(receiver))  # a retry carries the same id
    assert all(documented_recipe()["verified"](SECRET, d.signature, d.body) for d in receiver.taken())


def test_two_replicas_at_once_deliver_each_event_once(engine: Engine, receiver: WebhookReceiver):
    store = SqlStore(engine)
    replicas = [deliverer(engine, receiver.url, f"replica-{i}") for i in (1, 2)]
    replicas[0].deliver_due()
    start = replicas[0].cursor.status().through  # type: ignore[union-attr]
    writing = threading.Event()

    def deliver(replica: WebhookDeliverer) -> None:
        while writing.is_set() or len(receiver.taken()) < 20:
            replica.deliver_due()

    writing.set()
    threads = [threading.Thread(target=deliver, args=(replica,)) for replica in replicas]
    for thread in threads:
        thread.start()
    for run in ("run-a", "run-b"):
        create(store, run)
        note(store, run, 9)
    writing.clear()
    for thread in threads:
        thread.join(timeout=30)

    assert ids(receiver) == written_after(engine, start)
    assert sorted(r.delivered for r in replicas) == [0, 20]  # the lease's holder delivered all of them


def test_a_new_url_starts_at_the_end_of_the_log(engine: Engine, receiver: WebhookReceiver):
    store = SqlStore(engine)
    old = deliverer(engine, "http://127.0.0.1:9/gone", clock=Ticks(), lease=0.5)
    old.deliver_due()
    create(store, "run-a")  # never taken by the old receiver
    old.deliver_due()

    new = deliverer(engine, receiver.url, "replica-2")
    new.deliver_due()
    assert new.status().target == target_of(receiver.url)  # type: ignore[union-attr]
    note(store, "run-a", 1)
    wait_for(lambda: new.deliver_due() >= 0 and bool(receiver.taken()), what="the old replica's lease to lapse")

    assert ids(receiver) == ["run-a:2"]


def test_a_missing_number_holds_later_events_back_until_it_was_waited_for(engine: Engine,
                                                                        receiver: WebhookReceiver):
    store, ticks = SqlStore(engine), Ticks()
    stream = deliverer(engine, receiver.url, clock=ticks)
    stream.deliver_due()
    create(store, "run-a")
    with engine.begin() as conn:  # a number handed out to a transaction that has not committed
        row = conn.execute(select(events).where(events.c.run_id == "run-a")).one()._asdict()
        conn.execute(insert(events).values({**row, "id": row["id"] + 2, "run_id": "run-z"}))

    stream.deliver_due()
    assert ids(receiver) == ["run-a:1"]
    ticks.now += 4
    stream.deliver_due()
    assert ids(receiver) == ["run-a:1"]
    ticks.now += 1
    stream.deliver_due()
    assert ids(receiver) == ["run-a:1", "run-z:1"]


def test_the_status_says_how_far_behind_delivery_is_and_since_when_it_fails(engine: Engine):
    store, ticks = SqlStore(engine), Ticks()
    stream = deliverer(engine, "http://127.0.0.1:9/refused", clock=ticks)
    stream.deliver_due()
    assert stream.status().behind == 0 and stream.status().down_for is None  # type: ignore[union-attr]
    create(store, "run-a")
    note(store, "run-a", 1)
    stream.deliver_due()
    ticks.now += 60
    stream.deliver_due()

    status = stream.status()
    assert status is not None and (status.behind, status.failures) == (2, 2)
    assert status.last_error == "unreachable (ConnectError)" and status.down_for is not None
    assert status.lag_seconds >= 0 and stream.failed == 2 and stream.delivered == 0
    with engine.begin() as conn:
        conn.execute(update(audit_webhook).values(failing_since=status.now - timedelta(minutes=20)))
    assert stream.status().down_for >= timedelta(minutes=20)  # type: ignore[union-attr, operator]
