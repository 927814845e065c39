"""Bad input and faults: missing schema, unreachable or refused databases, corrupted state, lost connections."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from store_harness import (
    APPROVER,
    LOOKUP,
    REQUESTER,
    SEND,
    build_runner,
    count_rows,
    edit_state,
    raw_run,
    set_state,
    side_effects,
)

from signoff.runtime.adapters.db import ensure_schema, head_revision, make_engine, masked
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import metadata
from signoff.runtime.errors import ConfigError, IncompatibleState
from signoff.runtime.records import Decided
from signoff.runtime.runner import Runner

ONLY_POSTGRES = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)


def one_line_config_error(call: Callable[[], Any]) -> str:
    """The message of the `ConfigError` that `call` raises, checked to be one line with no chained traceback."""
    with pytest.raises(ConfigError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__
    return message


def test_an_empty_database_is_refused_with_the_command_that_fixes_it(engine: Engine) -> None:
    metadata.drop_all(engine)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
    message = one_line_config_error(lambda: ensure_schema(engine))
    assert "has no Signoff tables" in message and "run `signoff db upgrade`" in message
    ensure_schema(engine, auto_upgrade=True)
    ensure_schema(engine)
    assert SqlStore(engine).list_runs() == []


def test_an_out_of_date_schema_names_its_revision_and_the_upgrade(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    message = one_line_config_error(lambda: ensure_schema(engine))
    assert f"is at schema 0000, not {head_revision()}" in message and "signoff db upgrade" in message


def test_an_unreachable_database_is_one_line_with_the_password_masked() -> None:
    url = "postgresql+psycopg://signoff:hunter2@127.0.0.1:1/signoff"
    message = one_line_config_error(lambda: ensure_schema(make_engine(url)))
    assert "hunter2" not in message
    assert "cannot reach the database at postgresql+psycopg://signoff:***@127.0.0.1:1/signoff" in message
    assert masked(url) == "postgresql+psycopg://signoff:***@127.0.0.1:1/signoff"


@ONLY_POSTGRES
def test_refused_credentials_are_one_line_with_the_password_masked(database_url: str) -> None:
    url = make_url(database_url).set(username="no_such_role", password="s3cret-pw")
    message = one_line_config_error(lambda: ensure_schema(make_engine(url.render_as_string(hide_password=False))))
    assert "s3cret-pw" not in message and "no_such_role:***@" in message
    assert 'role "no_such_role" does not exist' in message


@pytest.mark.parametrize("url", ["not a url", "mysql://u:pw@db/x"])
def test_a_url_we_cannot_use_is_a_config_error(url: str) -> None:
    message = one_line_config_error(lambda: make_engine(url))
    assert "pw" not in message


def test_a_sqlite_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'signoff.db'}"
    message = one_line_config_error(lambda: ensure_schema(make_engine(url)))
    assert message.startswith(f"cannot reach the database at {url}: ")


@pytest.mark.parametrize("corrupt", [
    pytest.param(lambda engine, run_id: set_state(engine, run_id, '{"schema_version": 1, "status": "runn'),
                 id="invalid_json"),
    pytest.param(lambda engine, run_id: edit_state(engine, run_id, schema_version=99), id="unknown_version"),
])
def test_unreadable_state_is_refused_not_guessed(sql_runner: Runner, sql_store: SqlStore, corrupt: Any) -> None:
    runner, store = sql_runner, sql_store
    run = runner.start_run("find the orders", REQUESTER, model="scripted:lookups")
    corrupt(store.engine, run.run_id)
    stored = raw_run(store.engine, run.run_id)
    with pytest.raises(IncompatibleState, match="not valid JSON|schema version 99"):
        store.get_run(run.run_id)
    with pytest.raises(IncompatibleState):
        runner.execute(run.run_id)
    after = raw_run(store.engine, run.run_id)
    assert (after["state"], after["version"], after["status"]) == (stored["state"], stored["version"], "idle")
    assert after["lease_owner"] is None, "a worker that cannot read the run must not keep it from others"


class CutMidStep:
    """Breaks the transaction that writes a history entry containing `marker`, as a real fault would.

    `lost`: the connection dies under the open transaction; on PostgreSQL the server terminates
    the backend (`pg_terminate_backend` from another connection), on SQLite the connection is closed.
    `full`: SQLite may not grow the file any more (`max_page_count`), which fails the write with
    SQLITE_FULL, exactly as a full disk does.
    """

    def __init__(self, engine: Engine, marker: str, fault: str = "lost") -> None:
        self.engine, self.marker, self.fault, self.fired = engine, marker, fault, False
        self.admin = make_engine(engine.url.render_as_string(hide_password=False))

    def __call__(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if self.fired or not statement.startswith("INSERT INTO run_history"):
            return
        if self.marker not in str(getattr(context, "compiled_parameters", "")):
            return
        self.fired = True
        dbapi = conn.connection.dbapi_connection
        if self.fault == "full":
            pages = dbapi.execute("PRAGMA page_count").fetchone()[0]
            dbapi.execute(f"PRAGMA max_page_count = {pages}")
        elif self.engine.dialect.name == "postgresql":
            with self.admin.connect() as admin:
                assert admin.execute(text("SELECT pg_terminate_backend(:pid, 5000)"),
                                     {"pid": dbapi.info.backend_pid}).scalar_one()
        else:
            dbapi.close()

    def __enter__(self) -> CutMidStep:
        event.listen(self.engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self)
        self.admin.dispose()


def saved(store: SqlStore, run_id: str) -> tuple[Any, ...]:
    """What the database holds for the run: version, status, state, history, events and ledger."""
    row = raw_run(store.engine, run_id)
    return (row["version"], row["status"], row["state"], count_rows(store.engine, "run_history", run_id),
            count_rows(store.engine, "events", run_id), [x["status"] for x in store.executions(run_id)])


def three_lookups(model: str) -> Any:
    """Look up three pages, the second with a query too big to fit in the database's free pages; then answer."""
    def policy(history: list[dict[str, Any]]) -> dict[str, Any]:
        n = sum(e["role"] == "assistant" for e in history)
        if n == 3:
            return {"final": "found"}
        return {"tool": LOOKUP, "args": {"q": f"page {n}" + ("." * 60_000 if n == 1 else "")}}
    return policy


def interrupt_and_resume(store: SqlStore, effects: Path, fault: str) -> None:
    runner = build_runner(store, effects, policies=three_lookups, lease=30.0)
    run = runner.start_run("find the orders", REQUESTER)
    with CutMidStep(store.engine, "page 1", fault) as cut, pytest.raises(DBAPIError) as failure:
        runner.execute(run.run_id)
    assert cut.fired
    if fault == "full":
        assert "full" in str(failure.value)
        # Space is freed: the cap lives on the pooled connection that hit it, so drop the pool.
        store.engine.dispose()
    # Saved: the start (version 2) and step 1 (version 3). Step 2 left no trace.
    stopped = runner.get_run(run.run_id)
    assert (stopped.version, stopped.status, stopped.state["steps"], stopped.lease_owner) == (3, "running", 1, None)
    assert [e["role"] for e in stopped.state["history"]] == ["user", "assistant", "tool"]
    assert max(e.get("step", 0) for e in runner.timeline(run.run_id)) == 1

    assert runner.execute(run.run_id) == "done"
    history = runner.get_run(run.run_id).state["history"]
    assert [e["step"] for e in history if e["role"] == "tool"] == [1, 2, 3]
    timeline = runner.timeline(run.run_id)
    assert [e["seq"] for e in timeline] == list(range(1, len(timeline) + 1))


def test_a_connection_lost_mid_step_leaves_the_last_checkpoint_and_the_run_resumes(sql_store: SqlStore,
                                                                                   effects: Path) -> None:
    interrupt_and_resume(sql_store, effects, "lost")


def test_a_full_disk_mid_step_leaves_the_last_checkpoint_and_the_run_resumes(sqlite_url: str, effects: Path) -> None:
    engine = make_engine(sqlite_url)
    interrupt_and_resume(SqlStore(engine), effects, "full")
    engine.dispose()


def test_a_connection_lost_after_a_side_effect_leaves_its_outcome_unknown(
        sql_runner: Runner, sql_store: SqlStore, effects: Path) -> None:
    runner, store = sql_runner, sql_store
    run = runner.start_run("tell Ana", REQUESTER, model="scripted:send")
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    before = saved(store, run.run_id)

    with CutMidStep(store.engine, "sent_to") as cut, pytest.raises(DBAPIError):
        runner.execute(run.run_id)
    assert cut.fired
    assert side_effects(effects) == [(SEND, approval.key)]
    assert saved(store, run.run_id)[:4] == before[:4], "the step that ran the tool is not recorded"
    assert store.executions(run.run_id)[0]["status"] == "started"

    assert runner.execute(run.run_id) == "needs_reconciliation"
    assert side_effects(effects) == [(SEND, approval.key)]
