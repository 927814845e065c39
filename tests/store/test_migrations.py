"""The Alembic migrations build exactly the schema the store's table definitions describe."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError

from signoff.runtime.adapters.db import MIGRATIONS, current_revision, head_revision, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import metadata
from signoff.runtime.notices import Announce, PostCards, Redraw, TellEnd
from signoff.runtime.relay import FENCE


def test_migrated_database_has_every_table_column_and_index_the_store_uses(engine: Engine) -> None:
    assert current_revision(engine) == head_revision()
    found = inspect(engine)
    for table in metadata.tables.values():
        assert {c["name"] for c in found.get_columns(table.name)} == {c.name for c in table.columns}, table.name
        # PostgreSQL also lists the index behind each unique constraint; those are checked below.
        indexes = {i["name"] for i in found.get_indexes(table.name) if not i.get("duplicates_constraint")}
        assert indexes == {i.name for i in table.indexes}, table.name
        unique = {u["name"] for u in found.get_unique_constraints(table.name)}
        assert {c.name for c in table.constraints if c.__class__.__name__ == "UniqueConstraint"} <= unique, table.name


def test_a_database_of_the_first_schema_upgrades_with_its_approvals_and_their_keys(engine: Engine) -> None:
    """0001 -> 0002 recreates the approvals table (SQLite cannot drop a constraint in place): rows
    survive, and the key stays unique among approvals in force while a superseded one may repeat it."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0001")
    row = {"id": "apr_1", "run": "run-1", "key": "run-1:1"}
    insert = text("INSERT INTO approvals (approval_id, run_id, step, tool, args, key, digest, status, requester, "
                  "requested_at, expires_at) VALUES (:id, :run, 1, 'send', '{}', :key, 'd', :status, 'U1', "
                  "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)")
    with engine.begin() as conn:
        conn.execute(insert, {**row, "status": "approved"})
    assert upgrade(engine) == ("0001", head_revision())
    with engine.begin() as conn:
        assert conn.execute(text("SELECT status, contract FROM approvals")).all() == [("approved", None)]
        conn.execute(text("UPDATE approvals SET status = 'superseded'"))
        conn.execute(insert, {**row, "id": "apr_2", "status": "pending"})
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(insert, {**row, "id": "apr_3", "status": "approved"})


def test_cards_left_out_of_line_before_the_outbox_are_owed_a_redraw_after_the_upgrade(engine: Engine) -> None:
    """0014 -> 0015: a posted card whose `shown_status` differed from its approval's status (a crash
    or a Slack outage before it was redrawn) becomes a redraw owed; one in line owes nothing."""
    _downgrade(engine, "0014")
    insert = text("INSERT INTO approvals (approval_id, run_id, step, tool, args, key, digest, status, requester, "
                  "requested_at, expires_at, message, shown_status, quorum) VALUES (:id, 'run-1', 1, 'send', '{}', "
                  ":id, 'd', :status, 'U1', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, :message, :shown, 1)")
    posted = '{"channel": "C1", "ts": "1.1"}'
    with engine.begin() as conn:
        for approval_id, status, message, shown in [("apr_stale", "approved", posted, "pending"),
                                                     ("apr_in_line", "denied", posted, "denied"),
                                                     ("apr_used", "consumed", posted, "approved"),
                                                     ("apr_unposted", "approved", None, None)]:
            conn.execute(insert, {"id": approval_id, "status": status, "message": message, "shown": shown})
    assert upgrade(engine) == ("0014", head_revision())
    owed = SqlStore(engine).take_notices(FENCE)
    assert [(held.run_id, held.notice) for held in owed] == [("run-1", Redraw(approval_id="apr_stale"))]


def test_what_runs_owed_people_before_the_outbox_is_owed_after_the_upgrade(engine: Engine) -> None:
    """0015 -> 0016: a run's ending nobody heard of (`shown_status` differed), a card never posted
    and a run never announced become notices owed; a run told, and a caller's run that asks
    nobody, owe nothing."""
    _downgrade(engine, "0015")
    run = text("INSERT INTO runs (run_id, goal, requester, origin, model, status, state, history_len, version, "
               "event_count, created_at, updated_at, shown_status) VALUES (:id, 'g', 'U1', :origin, :model, "
               ":status, '{}', 0, 1, 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, :shown)")
    card = text("INSERT INTO approvals (approval_id, run_id, step, tool, args, key, digest, status, requester, "
                "requested_at, expires_at, quorum) VALUES ('apr_1', 'run-waits', 1, 'send', '{}', 'run-waits:1', "
                "'d', 'pending', 'U1', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 1)")
    announced = '{"channel": "C1", "ts": "1.1"}'
    with engine.begin() as conn:
        for run_id, status, origin, model, shown in [("run-told", "done", announced, "m", "done"),
                                                     ("run-untold", "failed", announced, "m", None),
                                                     ("run-waits", "awaiting_approval", announced, "m", None),
                                                     ("run-unannounced", "running", "{}", "m", None),
                                                     ("run-of-a-caller", "running", "{}", "caller", None)]:
            conn.execute(run, {"id": run_id, "status": status, "origin": origin, "model": model, "shown": shown})
        conn.execute(card)
    assert upgrade(engine) == ("0015", head_revision())
    store = SqlStore(engine)
    owed = {run_id: [held.notice for held in store.run_notices(run_id)]
            for run_id in ("run-told", "run-untold", "run-waits", "run-unannounced", "run-of-a-caller")}
    assert owed == {"run-told": [], "run-untold": [TellEnd(status="failed")], "run-waits": [PostCards(keys=("run-waits:1",))],
                    "run-unannounced": [Announce()], "run-of-a-caller": []}


def test_notices_owed_before_the_upgrade_are_kept_and_a_dropped_notices_place_is_never_given_again(
        engine: Engine) -> None:
    """0016 -> 0017: the outbox is made again (on SQLite, with AUTOINCREMENT) with what it held."""
    _downgrade(engine, "0016")
    owe = text("INSERT INTO notices (run_id, approval_id, kind, body, made_at, next_at) "
               "VALUES (:run_id, NULL, 'run_ended', '{\"status\": \"done\"}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)")
    with engine.begin() as conn:
        for run_id in ("run-a", "run-b"):
            conn.execute(owe, {"run_id": run_id})
    assert upgrade(engine) == ("0016", head_revision())
    store = SqlStore(engine)
    [kept] = store.run_notices("run-b")
    assert kept.notice == TellEnd(status="done")
    store.notice_sent(kept.seq)  # the last one owed, dropped
    with engine.begin() as conn:
        conn.execute(owe, {"run_id": "run-c"})
    [later] = store.run_notices("run-c")
    assert later.seq > kept.seq


def _downgrade(engine: Engine, revision: str) -> None:
    """Take the migrated database back to `revision`, as it was before the migrations after it."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)
