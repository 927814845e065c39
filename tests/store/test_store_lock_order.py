"""Lock order on PostgreSQL: a click or an expiry sweep racing a cancel must not deadlock.

Each race is staged exactly: the first transaction is held just before it touches the run row
until PostgreSQL shows the second one waiting for a lock, then both go on.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from store_harness import APPROVER, REQUESTER, ManualClock, build_runner, side_effects

from signoff.runtime import approval_commands
from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.records import Decided, Done

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)


def lock_waiters(admin: Any, app: str) -> int:
    with admin.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :app "
                                 "AND wait_event_type = 'Lock'"), {"app": app}).scalar_one()


@pytest.mark.parametrize("first", ["decide", "expire_due"])
def test_a_cancel_racing_a_decision_or_an_expiry_does_not_deadlock(database_url: str, effects: Path,
                                                                   clock: ManualClock, first: str) -> None:
    app = "lockorder-" + secrets.token_hex(4)
    engine = make_engine(database_url, connect_args={"application_name": app})
    admin = make_engine(database_url)
    store = SqlStore(engine, clock=clock)
    runner = build_runner(store, effects, lease=30.0)
    run = runner.start_run("tell Ana", REQUESTER)
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    if first == "expire_due":
        clock.advance(minutes=31)

    held = threading.Event()

    def hold_before_touching_the_run(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.current_thread().name == "first" and statement.startswith("UPDATE runs") and not held.is_set():
            held.set()
            deadline = time.monotonic() + 10
            while lock_waiters(admin, app) == 0 and time.monotonic() < deadline:
                time.sleep(0.01)

    event.listen(engine, "before_cursor_execute", hold_before_touching_the_run)
    results: dict[str, Any] = {}

    def attempt(name: str, action: Any) -> None:
        try:
            results[name] = action()
        except Exception as exc:  # reported by the assertion below
            results[name] = exc

    if first == "decide":
        go = lambda: approval_commands.decide(store, approval.approval_id, approved=True, user=APPROVER)  # noqa: E731
    else:
        go = lambda: approval_commands.expire_due(store)  # noqa: E731
    threads = [threading.Thread(target=attempt, args=("first", go), name="first"),
               threading.Thread(target=lambda: held.wait(10) and attempt("cancel", lambda: runner.cancel(
                   run.run_id, REQUESTER, "stop")), name="second")]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    finally:
        event.remove(engine, "before_cursor_execute", hold_before_touching_the_run)
    assert held.is_set()
    assert not isinstance(results["first"], Exception), results["first"]
    assert isinstance(results["cancel"], Done), results["cancel"]
    if first == "decide":
        assert isinstance(results["first"], Decided)
    else:
        assert [a.approval_id for a in results["first"]] == [approval.approval_id]
    assert runner.execute(run.run_id) in ("cancelled", "expired")
    assert side_effects(effects) == []
    engine.dispose()
    admin.dispose()
