"""The audit webhook through real processes: `signoff serve` delivering to a receiver that is down,
then up, across a restart of Signoff; `/metrics` saying how far behind it is; `signoff check`
failing once the receiver has taken nothing for long."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from serve_harness import serving
from sqlalchemy import Engine, select, update

from signoff.runtime.adapters.audit_cursor import SqlAuditCursor
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import audit_webhook, events
from signoff.runtime.audit_webhook import DeliveryStatus, target_of
from tests.fakes.receiver import WebhookReceiver, documented_recipe, wait_for
from tests.fakes.slack import FakeSlack
from tests.store.store_harness import create

SECRET = "whsec-serve-0123456789"


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    url = f"sqlite:///{tmp_path / 'signoff.db'}"
    engine = make_engine(url)
    upgrade(engine)
    yield url, engine
    engine.dispose()


def webhook_env(slack: FakeSlack, receiver: WebhookReceiver, url: str) -> dict[str, str]:
    return {"SLACK_BOT_TOKEN": "xoxb-good", "SLACK_SIGNING_SECRET": "s" * 12, "SLACK_API_URL": slack.url,
            "SIGNOFF_APPROVERS": "U0LEAD", "SIGNOFF_MODEL": "scripted:demo", "SIGNOFF_DATABASE_URL": url,
            "SIGNOFF_AUDIT_WEBHOOK_URL": receiver.url, "SIGNOFF_AUDIT_WEBHOOK_SECRET": SECRET,
            "SIGNOFF_LEASE_SECONDS": "1"}


def note(store: SqlStore, run_id: str, n: int) -> None:
    for i in range(n):
        store.append_event(run_id, {"type": "note_added", "text": f"note {i}"})


def written_after(engine: Engine, through: int) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(select(events.c.run_id, events.c.seq).where(events.c.id > through).order_by(events.c.id))
        return [f"{run_id}:{seq}" for run_id, seq in rows]


def ids(receiver: WebhookReceiver) -> list[str]:
    return [d.event["id"] for d in receiver.taken()]


def status(engine: Engine) -> DeliveryStatus:
    found = SqlAuditCursor(engine).status()
    assert found is not None
    return found


@pytest.mark.slow
def test_a_receiver_down_then_up_gets_every_event_once_in_order_across_a_restart(signoff, database):
    url, engine = database
    store, cursor = SqlStore(engine), SqlAuditCursor(engine)
    create(store, "run-before")  # written before the webhook was configured: export's, not the webhook's
    before = set(written_after(engine, 0))
    with FakeSlack(token="xoxb-good") as slack, WebhookReceiver() as receiver:
        env = webhook_env(slack, receiver, url)
        receiver.down = True
        with serving(signoff, env):
            wait_for(lambda: cursor.status() is not None, what="the cursor to be made")
            create(store, "run-a")
            note(store, "run-a", 2)
            wait_for(lambda: receiver.refused() >= 2, what="a retry")
        start = cursor.status().through  # type: ignore[union-attr]
        create(store, "run-b")  # written while Signoff is stopped
        receiver.down = False
        with serving(signoff, env) as (served, _):
            # Serve recovers both runs (and ends them: no such model), writing events of its own.
            wait_for(lambda: ids(receiver) == written_after(engine, start) and "run-b:1" in ids(receiver)
                     and status(engine).behind == 0, timeout=90, what="every event delivered")
            metrics = httpx.get(f"{served}/metrics").text
        taken = ids(receiver)

    # Serve's recovery drives run-before too, as it starts: its events from then may come first or
    # not at all (whether the cursor was made before them); none written before it ever comes.
    assert [i for i in taken if i.startswith("run-a:")][:3] == ["run-a:1", "run-a:2", "run-a:3"]
    for run in ("run-a", "run-b"):  # each run's events, every one of them, in order
        seqs = [int(i.rpartition(":")[2]) for i in taken if i.startswith(f"{run}:")]
        assert seqs == list(range(1, len(seqs) + 1))
    assert not before & set(taken)
    assert {d.event["id"] for d in receiver.deliveries} <= set(taken)  # a refused one came again, same id
    assert all(documented_recipe()["verified"](SECRET, d.signature, d.body) for d in receiver.deliveries)
    assert "signoff_audit_webhook_behind_events 0.0" in metrics
    assert f'signoff_audit_webhook_deliveries_total{{outcome="delivered"}} {len(taken)}.0' in metrics


def test_signoff_check_fails_when_the_receiver_has_taken_nothing_for_long(signoff, database):
    url, engine = database
    cursor = SqlAuditCursor(engine, clock=None)
    receiver_url = "http://127.0.0.1:9/hooks/signoff"
    env = {"SIGNOFF_DATABASE_URL": url, "SIGNOFF_AUDIT_WEBHOOK_URL": receiver_url,
           "SIGNOFF_AUDIT_WEBHOOK_SECRET": SECRET}
    cursor.start(target_of(receiver_url))
    assert "ok audit webhook: 127.0.0.1:9: caught up" in signoff.here("check", env=env).out
    create(SqlStore(engine), "run-a")
    cursor.claim("replica-1", timedelta(seconds=30))
    cursor.failed("replica-1", "HTTP 503")
    with engine.begin() as conn:
        conn.execute(update(audit_webhook).values(failing_since=cursor.now() - timedelta(minutes=20)))

    checked = signoff.here("check", env=env)

    assert checked.code == 1
    assert ("FAIL audit webhook: 127.0.0.1:9 has taken no event for 20 min (1 failed deliveries in a row, the "
            "last: HTTP 503); 1 events wait, and are delivered once it takes them") in checked.out
    no_secret = signoff.here("check", env={**env, "SIGNOFF_AUDIT_WEBHOOK_SECRET": ""})
    assert "FAIL audit webhook: SIGNOFF_AUDIT_WEBHOOK_SECRET: required with SIGNOFF_AUDIT_WEBHOOK_URL" in no_secret.out
