"""Leases, expiry and sweeps follow the database's clock, not the clock of the replica asking.

A replica whose clock is off is simulated by moving this process's wall clock (time-machine)
while the database server keeps its own. PostgreSQL only: SQLite has no clock of its own, its
file's host is every replica's host; and the memory store lives in one process, whose clock is
the only one its callers have.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from sqlalchemy import Engine
from store_harness import APPROVER, LEASE, create
from test_store_approvals import await_approval

from signoff.runtime import approval_commands
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.records import Decided, Expired

pytestmark = pytest.mark.postgres


@pytest.fixture
def server_store(engine: Engine) -> SqlStore:
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite's clock is its host's, which every replica shares")
    return SqlStore(engine)


@pytest.fixture(params=[90, -240], ids=["ahead", "behind"])
def skew(request: pytest.FixtureRequest) -> Iterator[float]:
    yield float(request.param)


def moved(seconds: float) -> time_machine.travel:
    return time_machine.travel(datetime.now(UTC) + timedelta(seconds=seconds), tick=True)


def test_a_replica_ahead_cannot_take_a_live_lease(server_store: SqlStore) -> None:
    create(server_store, "run-a")
    assert server_store.claim("run-a", "on-time", LEASE) is not None
    with moved(LEASE.total_seconds() * 3):
        assert server_store.claim("run-a", "fast", LEASE) is None
        assert "run-a" not in server_store.runs_needing_work()
    assert server_store.renew("run-a", "on-time", LEASE)


def test_leases_and_expiries_are_written_in_the_database_clock(server_store: SqlStore, skew: float) -> None:
    with moved(skew):
        approval = await_approval(server_store)
        run = server_store.claim("run-a", "w1", LEASE)
    real = datetime.now(UTC)
    assert abs((approval.requested_at - real).total_seconds()) < 5
    assert abs((run.lease_expires_at - (real + LEASE)).total_seconds()) < 5


def test_a_replica_ahead_neither_sweeps_early_nor_refuses_a_timely_click(server_store: SqlStore) -> None:
    approval = await_approval(server_store)
    with moved(approval.expires_at.timestamp() - datetime.now(UTC).timestamp() + 60):  # a replica far ahead
        assert approval_commands.expire_due(server_store) == [], "an open approval must not be swept by a fast clock"
        assert isinstance(approval_commands.decide(server_store, approval.approval_id, approved=True, user=APPROVER), Decided)


def test_a_click_after_expiry_is_refused_on_a_replica_whose_clock_is_behind(
        server_store: SqlStore, engine: Engine) -> None:
    approval = await_approval(server_store)
    with engine.begin() as conn:  # the approval's time ran out, by the database's clock
        conn.exec_driver_sql("UPDATE approvals SET expires_at = now() - interval '30 seconds'")
    with moved(-240):
        outcome = approval_commands.decide(server_store, approval.approval_id, approved=True, user=APPROVER)
    assert isinstance(outcome, Expired) and outcome.approval.status == "expired"
