"""The audit log's hash chains: every adapter writes them so that they verify, and a row edited,
deleted or reordered behind Signoff's back (SQL run directly on SQLite and PostgreSQL) is named
by run and `seq`, as is a deleted run."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, event, insert, select, text
from store_harness import LEASE, ManualClock, create, lookup_step, save, step
from test_store_approvals import approve, await_approval, begin

from scenarios.erasure import cut_back, erase_trail, rehash_chain
from signoff.runtime import approval_commands
from signoff.runtime.adapters.db import MIGRATIONS, upgrade
from signoff.runtime.adapters.rows import append_events
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import events, runs
from signoff.runtime.audit import (
    GENESIS,
    WHOLE_LOG,
    EventRow,
    Head,
    RunRow,
    Seal,
    Selection,
    event_hash,
    stamp,
)
from signoff.runtime.audit_export import export_lines, read_export
from signoff.runtime.audit_verify import Problem, verify
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.ports import Store
from signoff.runtime.records import Fresh
from signoff.runtime.state import canonical_json


def logged_run(store: Store, run_id: str = "run-a", steps: int = 5) -> None:
    """A run with `steps + 1` events: `run_created`, then one per saved step."""
    create(store, run_id)
    store.claim(run_id, "w1", LEASE)
    state, version = store.get_run(run_id).state, 1
    for i in range(steps):
        checkpoint = lookup_step(state, f"page {i}")
        version = save(store, run_id, version, checkpoint)
        state = checkpoint.state
    store.release(run_id, "w1")


def ended_run(store: Store, run_id: str = "run-a", steps: int = 5) -> None:
    """A run with `steps + 1` events whose last step ends it (`done`)."""
    create(store, run_id)
    store.claim(run_id, "w1", LEASE)
    state, version = store.get_run(run_id).state, 1
    for i in range(steps):
        checkpoint = lookup_step(state, f"page {i}") if i < steps - 1 else step(state, status="done")
        version = save(store, run_id, version, checkpoint)
        state = checkpoint.state
    store.release(run_id, "w1")


def head_of(store: Store) -> Head:
    [head] = [r for r in store.audit_records() if isinstance(r, Head)]
    return head


def problem(store: Store, selection: Selection = WHOLE_LOG) -> tuple[str | None, int | None, str] | None:
    found = verify(store.audit_records(selection), selection)
    return (found.run_id, found.seq, found.kind) if found is not None else None


def run_c_link(records: list[Any]) -> str:
    [run_c] = [r for r in records if isinstance(r, RunRow) and r.run_id == "run-c"]
    return str(run_c.link.hash)


def rows_of(store: Store, run_id: str) -> list[EventRow]:
    return [r for r in store.audit_records(Selection(run_id=run_id)) if isinstance(r, EventRow)]


def run_row(engine: Engine, run_id: str) -> dict[str, Any]:
    """The run's row, typed as the store reads it."""
    with engine.connect() as conn:
        return dict(conn.execute(select(runs).where(runs.c.run_id == run_id)).one()._mapping)


def sql(engine: Engine, *statements: str, **params: Any) -> None:
    """Change rows directly, as someone with access to the database (not to Signoff) would."""
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement), params)


# -- what every adapter writes -------------------------------------------------------------------


def test_every_event_hashes_its_content_and_the_event_before_it(store: Store, clock: ManualClock) -> None:
    logged_run(store)
    store.append_event("run-a", {"type": "note", "text": "checked by hand"})
    approve(store, await_approval(store, "run-c"))
    assert isinstance(begin(store, key="run-c:1"), Fresh)
    await_approval(store, "run-b")
    clock.advance(hours=2)
    assert approval_commands.expire_due(store)  # the sweep numbers many runs' events in one statement

    for run_id in ("run-a", "run-b", "run-c"):
        rows = rows_of(store, run_id)
        assert [(r.seq, r.type) for r in rows] == [(e["seq"], e["type"]) for e in store.timeline(run_id)]
        prev = GENESIS
        for row in rows:
            assert row.prev == prev
            assert row.hash == event_hash(run_id, row.seq, row.type, row.at, row.payload, prev)
            prev = row.hash
        [run] = [r for r in store.audit_records(Selection(run_id=run_id)) if isinstance(r, RunRow)]
        assert run.events == rows[-1].seq
    assert problem(store) is None


def test_the_chain_of_runs_links_every_run_in_the_order_they_were_created(store: Store) -> None:
    for run_id in ("run-c", "run-a", "run-b"):
        create(store, run_id)
    records = list(store.audit_records())
    linked = [(r.run_id, r.link.position) for r in records if isinstance(r, RunRow) and r.link is not None]
    assert linked == [("run-c", 1), ("run-a", 2), ("run-b", 3)]
    [head] = [r for r in records if isinstance(r, Head)]
    last = [r for r in records if isinstance(r, RunRow)][-1].link
    assert last is not None and (head.links, head.hash) == (3, last.hash)
    assert problem(store) is None


def test_a_step_that_leaves_a_run_waiting_or_ended_seals_its_events(store: Store) -> None:
    """Each seal records the run's last event then, chained after the link before it; steps that
    leave the run moving seal nothing."""
    await_approval(store, "run-a")
    ended_run(store, "run-b", steps=3)
    logged_run(store, "run-c", steps=2)

    records = list(store.audit_records())
    seals = [r for r in records if isinstance(r, Seal)]
    assert [(s.run_id, s.position, s.seq) for s in seals] == [("run-a", 2, 2), ("run-b", 4, 4)]
    for seal in seals:
        [sealed] = [r for r in rows_of(store, seal.run_id) if r.seq == seal.seq]
        assert seal.last == sealed.hash
    assert (head_of(store).links, head_of(store).hash) == (5, run_c_link(records))
    assert problem(store) is None


def test_times_are_hashed_as_the_store_gives_them_back(store: Store, clock: ManualClock) -> None:
    """Microseconds and the zone survive the round trip on each backend, so a check reads back
    exactly what was hashed."""
    clock.now = datetime(2026, 3, 1, 17, 30, 0, 123457, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    logged_run(store, steps=2)
    rows = rows_of(store, "run-a")
    assert {r.at for r in rows} == {clock.now}
    assert {stamp(r.at) for r in rows} == {"2026-03-01T12:00:00.123457+00:00"}
    assert problem(store) is None


def test_writers_on_many_threads_never_fork_a_chain(store: Store) -> None:
    create(store, "run-a")

    def write(writer: int) -> None:
        for i in range(8):
            store.append_event("run-a", {"type": "note", "writer": writer, "i": i})
            if i % 4 == 0:
                create(store, f"run-{writer}-{i}")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store.timeline("run-a")) == 1 + 4 * 8
    assert problem(store) is None


def test_an_export_verifies_without_the_store_and_shows_an_edit_to_it(store: Store, clock: ManualClock) -> None:
    logged_run(store, "run-a", steps=2)
    since = clock.now + timedelta(minutes=1)
    clock.advance(minutes=5)
    logged_run(store, "run-b", steps=2)
    for i in range(3):
        store.append_event("run-a", {"type": "note", "i": i})

    whole = list(export_lines(store.audit_records(), Selection(), clock.now))
    selection, records = read_export(whole)
    assert selection == Selection() and verify(records, selection) is None

    garbled = [*whole[:3], '{"record": "event", "run_id": "run-a", "se', *whole[3:]]
    assert verify(read_export(garbled)[1]) == Problem(None, None, "edited", "it is no audit record (not JSON)", line=4)

    edited = [line.replace('"i\\":1', '"i\\":7') for line in whole]
    assert edited != whole
    assert verify(read_export(edited)[1]) == Problem("run-a", 5, "edited", "its type, time, payload or hash is not "
                                                                           "what was written")

    recent = Selection(since=since)
    lines = list(export_lines(store.audit_records(recent), recent, clock.now))
    selection, records = read_export(lines)
    events_read = [r for r in records if isinstance(r, EventRow)]
    assert selection == recent
    assert [(r.run_id, r.seq) for r in events_read] == [("run-a", 4), ("run-a", 5), ("run-a", 6)] + [
        ("run-b", seq) for seq in range(1, 4)]
    assert verify(read_export(lines)[1], selection) is None
    without_one = [line for line in lines if '"seq":5' not in line]
    assert verify(read_export(without_one)[1], selection) == Problem("run-a", 5, "missing",
                                                                     "event 5 is gone (the next is 6)")


# -- changes made behind Signoff's back (SQL on SQLite and PostgreSQL) ------------------------------


def test_an_edited_payload_is_named_by_run_and_seq(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store)
    sql(engine, "UPDATE events SET payload = :p WHERE run_id = 'run-a' AND seq = 3", p='{"step":99}')
    found = verify(sql_store.audit_records())
    assert found is not None and (found.run_id, found.seq, found.kind) == ("run-a", 3, "edited")
    assert str(found).startswith("run run-a, event 3: edited")


def test_a_time_moved_by_a_microsecond_is_an_edit(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store)
    row = rows_of(sql_store, "run-a")[1]
    with engine.begin() as conn:
        conn.execute(events.update().where(events.c.run_id == "run-a", events.c.seq == 2)
                     .values(at=row.at + timedelta(microseconds=1)))
    assert problem(sql_store) == ("run-a", 2, "edited")


def test_a_deleted_event_is_missing(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store)
    sql(engine, "DELETE FROM events WHERE run_id = 'run-a' AND seq = 4")
    assert problem(sql_store) == ("run-a", 4, "missing")


def test_deleted_last_events_are_missing(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store)
    sql(engine, "DELETE FROM events WHERE run_id = 'run-a' AND seq >= 5")
    assert problem(sql_store) == ("run-a", 5, "missing")


def test_a_deleted_event_with_the_rest_renumbered_is_missing(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store)
    sql(engine, "DELETE FROM events WHERE run_id = 'run-a' AND seq = 3",
        "UPDATE events SET seq = seq - 1 WHERE run_id = 'run-a' AND seq = 4",
        "UPDATE events SET seq = seq - 1 WHERE run_id = 'run-a' AND seq = 5",
        "UPDATE events SET seq = seq - 1 WHERE run_id = 'run-a' AND seq = 6",
        "UPDATE runs SET event_count = 5 WHERE run_id = 'run-a'")
    found = verify(sql_store.audit_records())
    assert found is not None and (found.run_id, found.seq, found.kind) == ("run-a", 3, "missing")
    assert "renumbered" in found.detail


def test_two_events_swapped_are_reordered(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store)
    sql(engine, "UPDATE events SET seq = -3 WHERE run_id = 'run-a' AND seq = 3",
        "UPDATE events SET seq = 3 WHERE run_id = 'run-a' AND seq = 4",
        "UPDATE events SET seq = 4 WHERE run_id = 'run-a' AND seq = -3")
    found = verify(sql_store.audit_records())
    assert found == Problem("run-a", 3, "reordered", "event 3 was written as event 4")


def test_two_events_contents_swapped_are_reordered(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store)
    rows = {r.seq: r for r in rows_of(sql_store, "run-a")}
    for seq, other in ((2, 5), (5, 2)):
        sql(engine, "UPDATE events SET type = :t, payload = :p WHERE run_id = 'run-a' AND seq = :s",
            t=rows[other].type, p=rows[other].payload, s=seq)
    assert problem(sql_store) == ("run-a", 2, "reordered")


def test_a_deleted_run_leaves_its_link_behind(sql_store: SqlStore, engine: Engine) -> None:
    for run_id in ("run-a", "run-b", "run-c"):
        logged_run(sql_store, run_id, steps=1)
    sql(engine, *[f"DELETE FROM {table} WHERE run_id = 'run-b'" for table in ("runs", "events", "run_history")])
    found = verify(sql_store.audit_records())
    assert found == Problem("run-b", None, "deleted run", "run #2 of the chain of runs is gone")


def test_a_run_deleted_with_its_link_breaks_the_chain_of_runs(sql_store: SqlStore, engine: Engine) -> None:
    for run_id in ("run-a", "run-b", "run-c"):
        logged_run(sql_store, run_id, steps=1)
    sql(engine, *[f"DELETE FROM {table} WHERE run_id = 'run-b'"
                  for table in ("runs", "events", "run_history", "run_chain")])
    assert problem(sql_store) == ("run-c", None, "deleted run")

    sql(engine, *[f"DELETE FROM {table} WHERE run_id = 'run-c'"
                  for table in ("runs", "events", "run_history", "run_chain")])
    found = verify(sql_store.audit_records())
    assert found == Problem(None, None, "deleted run", "links #2 to #3 are gone from its end")


def test_a_run_added_by_hand_is_not_in_the_chain_of_runs(sql_store: SqlStore, engine: Engine) -> None:
    """Even hashed as Signoff would hash it, a run written around Signoff has no link."""
    logged_run(sql_store, steps=1)
    forged = {**run_row(engine, "run-a"), "run_id": "run-x"}
    rows, prev = [], GENESIS
    for row in rows_of(sql_store, "run-a"):
        digest = event_hash("run-x", row.seq, row.type, row.at, row.payload, prev)
        rows.append({"run_id": "run-x", "seq": row.seq, "type": row.type, "at": row.at, "payload": row.payload,
                     "prev_hash": prev, "hash": digest})
        prev = digest
    with engine.begin() as conn:
        conn.execute(insert(runs).values(**forged))
        conn.execute(insert(events), rows)
    assert problem(sql_store) == ("run-x", None, "unchained")


def test_the_first_problem_is_in_the_run_created_first(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store, "run-b")
    logged_run(sql_store, "run-a")
    sql(engine, "UPDATE events SET payload = '{}' WHERE run_id = 'run-a' AND seq = 2",
        "UPDATE events SET payload = '{}' WHERE run_id = 'run-b' AND seq = 4")
    assert problem(sql_store) == ("run-b", 4, "edited")
    assert problem(sql_store, Selection(run_id="run-a")) == ("run-a", 2, "edited")


def test_checking_one_run_is_not_disturbed_by_another(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store, "run-a")
    logged_run(sql_store, "run-b")
    sql(engine, "DELETE FROM events WHERE run_id = 'run-b' AND seq = 2")
    assert problem(sql_store, Selection(run_id="run-a")) is None
    assert problem(sql_store, Selection(run_id="run-b")) == ("run-b", 2, "missing")


def test_a_writer_that_waited_for_another_chains_after_the_others_events(sql_store: SqlStore,
                                                                          engine: Engine, clock: ManualClock) -> None:
    """PostgreSQL: an UPDATE that waited for another writer's lock on the run's row reads the events
    as they were before that writer committed; the next event must follow that writer's all the same."""
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite: a writer takes the database's lock before it reads anything")
    logged_run(sql_store, steps=1)
    second = threading.Thread(target=sql_store.append_event, args=("run-a", {"type": "note", "by": "second"}))
    with engine.connect() as holder, holder.begin():
        append_events(holder, "run-a", [{"type": "note", "by": "first"}], clock.now)  # holds the run's row
        pid = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
        second.start()
        for _ in range(1000):  # ten seconds at most
            if waits_for(engine, pid):
                break
            second.join(0.01)
        else:
            raise AssertionError("the second writer never waited for the first")
    second.join()
    assert [e.get("by") for e in sql_store.timeline("run-a")][-2:] == ["first", "second"]
    assert problem(sql_store) is None


def waits_for(engine: Engine, pid: int) -> bool:
    """Whether a PostgreSQL session waits for a lock the session `pid` holds (read in a transaction
    of its own: a transaction keeps the activity it first read)."""
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"),
                                 {"pid": pid}).scalar_one())


def test_hashes_match_on_the_databases_own_clock(engine: Engine) -> None:
    store = SqlStore(engine)  # PostgreSQL's now(), or this host's clock on SQLite
    logged_run(store)
    assert problem(store) is None


def test_a_step_chains_its_events_without_reading_any_row(sql_store: SqlStore, engine: Engine) -> None:
    """The hash a step's events follow comes back from the run row's UPDATE: no SELECT, and as
    many statements for four events as for one."""
    create(sql_store)
    sql_store.claim("run-a", "w1", LEASE)
    state, version = sql_store.get_run("run-a").state, 1
    statements: list[list[str]] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements[-1].append(statement.lstrip().split()[0].upper())

    event.listen(engine, "before_cursor_execute", record)
    try:
        for count in (1, 4):
            statements.append([])
            checkpoint = step(state, events=[{"type": "decision", "n": n} for n in range(count)])
            version = save(sql_store, "run-a", version, checkpoint)
            state = checkpoint.state
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert "SELECT" not in statements[0] + statements[1]
    assert len(statements[0]) == len(statements[1])
    assert problem(sql_store) is None


def test_an_upgraded_database_chains_the_events_it_already_held(sql_store: SqlStore, engine: Engine,
                                                                 clock: ManualClock) -> None:
    """0007 hashes what was there, in batches (runs here straddle them), and Signoff's later writes
    follow on from those hashes. The downgrade drops the chains; the upgrade makes them again."""
    logged_run(sql_store, "run-a", steps=2)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0006")
    at = (clock.now + timedelta(seconds=1)).replace(microsecond=654321)
    template = run_row(engine, "run-a")
    with engine.begin() as conn:
        for n in range(3):
            run_id = f"run-old-{n}"
            conn.execute(insert(runs).values(**{**template, "run_id": run_id, "event_count": 700,
                                                 "created_at": at + timedelta(minutes=n)}))
            conn.execute(insert(events), [{"run_id": run_id, "seq": seq, "type": "note", "at": at,
                                           "payload": canonical_json({"seq": seq})} for seq in range(1, 701)])
    upgrade(engine)

    assert problem(sql_store) is None
    positions = {r.run_id: r.link.position for r in sql_store.audit_records() if isinstance(r, RunRow) and r.link}
    assert positions == {"run-a": 1, "run-old-0": 2, "run-old-1": 3, "run-old-2": 4}
    sql_store.append_event("run-old-1", {"type": "note", "after": "the upgrade"})
    create(sql_store, "run-new")
    assert problem(sql_store) is None
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events WHERE hash IS NULL")).scalar_one() == 0
    sql(engine, "UPDATE events SET payload = :p WHERE run_id = 'run-old-2' AND seq = 650", p=json.dumps({"seq": 1}))
    assert problem(sql_store) == ("run-old-2", 650, "edited")


def test_a_runs_trail_erased_with_its_count_zeroed_is_missing(sql_store: SqlStore, engine: Engine) -> None:
    """Its link still holds its first event's hash: the row's count does not get a say."""
    for run_id in ("run-a", "run-b", "run-c"):
        ended_run(sql_store, run_id, steps=2)
    erase_trail(engine, "run-b")
    assert verify(sql_store.audit_records()) == Problem("run-b", 1, "missing", "all of its events are gone")


def test_a_runs_newest_events_cut_with_its_count_lowered_are_missing(sql_store: SqlStore, engine: Engine) -> None:
    ended_run(sql_store, "run-a")
    ended_run(sql_store, "run-b")
    cut_back(engine, "run-a", 3)
    assert verify(sql_store.audit_records()) == Problem("run-a", 4, "missing", "events 4 to 6 are gone: the run "
                                                                               "was sealed at event 6 (#2)")


def test_a_log_cut_and_rehashed_shows_only_against_a_head_kept_earlier(sql_store: SqlStore, engine: Engine) -> None:
    for run_id in ("run-a", "run-b", "run-c"):
        ended_run(sql_store, run_id)
    kept = head_of(sql_store).hash
    assert verify(sql_store.audit_records(), since_head=kept) is None

    cut_back(engine, "run-b", 3)
    rehash_chain(engine)
    ended_run(sql_store, "run-d")

    assert verify(sql_store.audit_records()) is None
    found = verify(sql_store.audit_records(), since_head=kept)
    assert found is not None and (found.run_id, found.seq, found.kind) == (None, None, "rewritten")
    assert kept in str(found)


def test_a_head_printed_before_the_seals_still_holds_after_the_upgrade(sql_store: SqlStore, engine: Engine) -> None:
    """0008 keeps every link's hash and seals each run as it stands, so a cut made after the
    upgrade shows, and the head printed before it is still in the chain."""
    ended_run(sql_store, "run-a")
    ended_run(sql_store, "run-b")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0007")
        kept = conn.execute(text("SELECT hash FROM audit_head")).scalar_one()
    upgrade(engine)

    assert verify(sql_store.audit_records(), since_head=kept) is None
    assert [(s.run_id, s.seq) for s in sql_store.audit_records() if isinstance(s, Seal)] == [("run-a", 6),
                                                                                                ("run-b", 6)]
    cut_back(engine, "run-a", 2)
    assert problem(sql_store) == ("run-a", 3, "missing")


def test_without_the_head_of_the_chain_of_runs_no_run_can_be_created(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store, steps=1)
    sql(engine, "DELETE FROM audit_head")
    assert verify(sql_store.audit_records()) == Problem(None, None, "missing", "its head is gone")
    with pytest.raises(IncompatibleState, match="audit_head"):
        create(sql_store, "run-b")
    assert sql_store.get_run("run-b") is None


def test_a_chain_of_runs_deleted_whole_is_named(sql_store: SqlStore, engine: Engine) -> None:
    logged_run(sql_store, "run-a", steps=1)
    logged_run(sql_store, "run-b", steps=1)
    sql(engine, "DELETE FROM run_chain")
    assert verify(sql_store.audit_records()) == Problem(None, None, "deleted run",
                                                        "links #1 to #2 are gone from its end")
