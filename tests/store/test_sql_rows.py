"""How the SQL store lays its contract out in rows and statements (SQLite and PostgreSQL): history in
rows of its own, expiry in one statement, the ledger's and the pending key's columns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert
from sqlalchemy.exc import IntegrityError
from store_harness import LEASE, ManualClock, count_rows, create, lookup_step, raw_run, save, step
from test_store_approvals import approve, await_approval, begin, overdue_and_not

from signoff.runtime import approval_commands
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import tool_executions


def test_save_step_appends_history_rows_and_keeps_it_out_of_the_state_column(sql_store: SqlStore,
                                                                               engine: Engine) -> None:
    store = sql_store
    create(store)
    store.claim("run-a", "w1", LEASE)
    state, version = store.get_run("run-a").state, 1
    for i in range(3):
        checkpoint = lookup_step(state, f"marker-{i}")
        version = save(store, "run-a", version, checkpoint)
        state = checkpoint.state
        assert count_rows(engine, "run_history", "run-a") == 2 * (i + 1)
    row = raw_run(engine, "run-a")
    assert "history" not in json.loads(row["state"])
    assert "marker-" not in row["state"]
    assert row["history_len"] == 6
    run = store.get_run("run-a")
    assert run.state["history"] == state["history"]
    assert (run.version, run.state["steps"]) == (4, 3)


def test_expiry_is_one_statement_however_many_are_due(sql_store: SqlStore, clock: ManualClock,
                                                      engine: Engine) -> None:
    overdue, _, _ = overdue_and_not(sql_store, clock)
    approval_updates: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE APPROVALS"):
            approval_updates.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        expired = approval_commands.expire_due(sql_store)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(approval_updates) == 1, "expiry is one statement"
    assert sorted(a.approval_id for a in expired) == sorted(a.approval_id for a in overdue)


def test_the_ledger_holds_one_row_per_key(sql_store: SqlStore, engine: Engine, clock: ManualClock) -> None:
    approval = await_approval(sql_store)
    approve(sql_store, approval)
    begin(sql_store)
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(insert(tool_executions).values(key="run-a:1", run_id="run-a", tool="send_email", digest="d",
                                                    status="started", attempts=1, started_at=clock.now))
    assert len(sql_store.executions("run-a")) == 1


def test_the_step_that_reports_a_call_clears_the_runs_pending_key(sql_store: SqlStore, engine: Engine) -> None:
    approval = await_approval(sql_store)
    assert raw_run(engine, "run-a")["pending_key"] == approval.key
    approve(sql_store, approval)
    begin(sql_store)
    run = sql_store.get_run("run-a")
    outcome = {"key": "run-a:1", "tool": "send_email", "ok": True, "result": {"id": 7}, "seconds": 0.1}
    save(sql_store, "run-a", run.version,
         step(run.state, {"role": "tool", "step": 1, "tool": "send_email", "call_id": "c1", "result": {"id": 7}},
              execution=outcome))
    assert raw_run(engine, "run-a")["pending_key"] is None
