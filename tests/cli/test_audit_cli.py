"""`signoff audit verify` and `signoff audit export`, as an operator meets them: intact after a run,
the first changed event named by run and seq, an export checked later without the database; and
`signoff --version`."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import version

import pytest
from sqlalchemy import Engine, text

from scenarios.erasure import HEAD, cut_back, erase_trail, rehash_chain
from signoff.runtime.adapters.db import make_engine
from tests.conftest import fresh_database_url


def demo_run(signoff, *flags: str) -> str:
    result = signoff.here("demo", "--quiet", *flags, answers="a\n")
    assert result.code == 0, result.err
    return result.out.split()[0]


def edit_demo_database(signoff, statement: str, *params: object) -> None:
    with sqlite3.connect(signoff.cwd / "signoff-demo.db") as db:
        db.execute(statement, params)


@contextmanager
def demo_database(signoff) -> Iterator[Engine]:
    """The demo's database, as someone with SQL access to it holds it."""
    engine = make_engine(f"sqlite:///{signoff.cwd / 'signoff-demo.db'}")
    try:
        yield engine
    finally:
        engine.dispose()


def attacked(signoff, attack: Callable[[Engine], None]) -> None:
    with demo_database(signoff) as engine:
        attack(engine)


def test_version_prints_the_installed_version(signoff):
    result = signoff("--version")

    assert (result.code, result.out) == (0, f"signoff {version('signoff')}\n")


def test_verify_says_intact_after_a_run_and_names_the_event_edited_since(signoff):
    run_id = demo_run(signoff)

    intact = signoff.here("audit", "verify", "--demo")
    edit_demo_database(signoff, "UPDATE events SET payload = '{\"approved\":true}' WHERE run_id = ? AND seq = 3",
                       run_id)
    edited = signoff.here("audit", "verify", "--demo")

    assert intact.code == 0, intact.err
    assert intact.out.startswith("intact: 1 run, ")
    assert re.search(r" events in sqlite:///signoff-demo\.db; the chain of runs ends at #\d+ [0-9a-f]{64}\n$",
                     intact.out)
    assert (edited.code, edited.out) == (1, f"does not match: run {run_id}, event 3: edited: its type, time, "
                                            "payload or hash is not what was written\n")


def test_a_deleted_run_is_named(signoff):
    first, second = demo_run(signoff), demo_run(signoff)
    for table in ("runs", "events", "run_history"):
        edit_demo_database(signoff, f"DELETE FROM {table} WHERE run_id = ?", first)

    result = signoff.here("audit", "verify", "--demo")
    only_the_other = signoff.here("audit", "verify", "--demo", "--run", second)

    assert (result.code, result.out) == (1, f"does not match: run {first}: deleted run: run #1 of the chain of "
                                            "runs is gone\n")
    assert only_the_other.code == 0 and only_the_other.out.startswith("intact: 1 run, ")


def test_a_runs_trail_erased_with_its_count_zeroed_is_named(signoff):
    first = demo_run(signoff)
    demo_run(signoff)
    attacked(signoff, lambda engine: erase_trail(engine, first))

    result = signoff.here("audit", "verify", "--demo")

    assert (result.code, result.out) == (1, f"does not match: run {first}, event 1: missing: all of its events are "
                                            "gone\n")


def test_a_runs_newest_events_cut_with_its_count_lowered_are_named(signoff):
    run_id = demo_run(signoff)
    attacked(signoff, lambda engine: cut_back(engine, run_id, 10))

    result = signoff.here("audit", "verify", "--demo")

    assert result.code == 1
    assert result.out.startswith(f"does not match: run {run_id}, event 11: missing: events 11 to ")


def test_a_log_rehashed_after_a_cut_fails_only_against_the_head_printed_before(signoff):
    first = demo_run(signoff)
    demo_run(signoff)
    before = signoff.here("audit", "verify", "--demo")
    kept = HEAD.search(before.out).group(1)
    still = signoff.here("audit", "verify", "--demo", "--since-head", kept)
    attacked(signoff, lambda engine: (cut_back(engine, first, 4), rehash_chain(engine)))

    rehashed = signoff.here("audit", "verify", "--demo")
    against_the_head = signoff.here("audit", "verify", "--demo", "--since-head", kept)

    assert still.code == 0 and still.out.endswith(f", through {kept}\n")
    assert rehashed.code == 0 and rehashed.out.startswith("intact: 2 runs, ")
    assert (against_the_head.code, against_the_head.out) == (
        1, f"does not match: the chain of runs: rewritten: it does not pass through the head {kept} kept earlier: "
           "what came before that head was rewritten, or cut back\n")


def test_an_export_is_checked_later_without_the_database(signoff):
    run_id = demo_run(signoff)
    exported = signoff.here("audit", "export", "--demo")
    lines = exported.out.splitlines()
    (signoff.cwd / "signoff-demo.db").unlink()
    events = [n for n, line in enumerate(lines) if json.loads(line)["record"] == "event"]
    (signoff.cwd / "audit.jsonl").write_text(exported.out)
    (signoff.cwd / "cut.jsonl").write_text("\n".join(lines[:events[4]] + lines[events[4] + 1:]) + "\n")
    swapped = list(lines)
    swapped[events[5]], swapped[events[6]] = lines[events[6]], lines[events[5]]
    (signoff.cwd / "swapped.jsonl").write_text("\n".join(swapped) + "\n")

    intact = signoff.here("audit", "verify", "--file", "audit.jsonl")
    cut = signoff.here("audit", "verify", "--file", "cut.jsonl")
    reordered = signoff.here("audit", "verify", "--file", "swapped.jsonl")

    assert exported.code == 0 and json.loads(lines[0])["record"] == "export"
    assert intact.code == 0 and intact.out.startswith(f"intact: 1 run, {len(events)} events in audit.jsonl; ")
    assert (cut.code, cut.out) == (1, f"does not match: run {run_id}, event 5: missing: event 5 is gone "
                                      "(the next is 6)\n")
    assert (reordered.code, reordered.out) == (1, f"does not match: run {run_id}, event 7: reordered: event 7 "
                                                  "comes before event 6\n")


def test_an_export_since_a_time_holds_each_runs_events_from_then(signoff):
    earlier = demo_run(signoff)
    since = datetime.now(UTC).isoformat()
    later = demo_run(signoff)

    exported = signoff.here("audit", "export", "--demo", "--since", since)
    (signoff.cwd / "recent.jsonl").write_text(exported.out)
    checked = signoff.here("audit", "verify", "--file", "recent.jsonl")

    records = [json.loads(line) for line in exported.out.splitlines()]
    assert {r["run_id"] for r in records if r["record"] == "event"} == {later}
    assert {r["run_id"] for r in records if r["record"] == "run"} == {earlier, later}
    assert checked.code == 0, checked.out
    assert f"(each run's events from {since})" in checked.out


def test_reading_the_audit_log_creates_no_database(signoff):
    verified = signoff.here("audit", "verify")
    exported = signoff.here("audit", "export")

    assert (verified.code, verified.out) == (0, "no runs yet in sqlite:///signoff.db: nothing to verify\n")
    assert (exported.code, exported.out) == (0, "")
    assert not (signoff.cwd / "signoff.db").exists()


def test_what_cannot_be_checked_is_refused_with_a_reason(signoff):
    demo_run(signoff)
    (signoff.cwd / "notes.txt").write_text("hello\n")

    unknown_run = signoff.here("audit", "verify", "--demo", "--run", "run-nope")
    not_an_export = signoff.here("audit", "verify", "--file", "notes.txt")
    bad_time = signoff.here("audit", "export", "--demo", "--since", "last tuesday")

    assert (unknown_run.code, unknown_run.err) == (1, "error: no run 'run-nope' in sqlite:///signoff-demo.db\n")
    assert not_an_export.code == 1
    assert not_an_export.err.startswith("error: not a Signoff audit export")
    assert bad_time.code == 2 and "'last tuesday' is not an ISO 8601 time" in bad_time.err


@pytest.mark.postgres
def test_verify_names_an_event_deleted_in_postgresql(signoff, tmp_path):
    databases = fresh_database_url("postgres", tmp_path)
    url = next(databases)
    try:
        # In a process of its own: the demo leaves its connections open, which the driver warns of here.
        demo = signoff("demo", "--quiet", "--database-url", url, answers="a\n")
        assert demo.code == 0, demo.err
        run_id = demo.out.split()[0]
        intact = signoff.here("audit", "verify", "--database-url", url)
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM events WHERE run_id = :id AND seq = 2"), {"id": run_id})
        engine.dispose()
        deleted = signoff.here("audit", "verify", "--database-url", url)
    finally:
        next(databases, None)

    assert intact.code == 0 and intact.out.startswith("intact: 1 run, ")
    assert (deleted.code, deleted.out) == (1, f"does not match: run {run_id}, event 2: missing: event 2 is gone "
                                              "(the next is 3)\n")


@pytest.mark.postgres
def test_verify_names_a_trail_erased_and_a_cut_in_postgresql(signoff, tmp_path):
    databases = fresh_database_url("postgres", tmp_path)
    url = next(databases)
    try:
        runs = []
        for _ in range(2):
            demo = signoff("demo", "--quiet", "--database-url", url, answers="a\n")
            assert demo.code == 0, demo.err
            runs.append(demo.out.split()[0])
        engine = make_engine(url)
        erase_trail(engine, runs[0])
        erased = signoff.here("audit", "verify", "--database-url", url)
        cut_back(engine, runs[1], 5)
        only_the_cut = signoff.here("audit", "verify", "--database-url", url, "--run", runs[1])
        engine.dispose()
    finally:
        next(databases, None)

    assert (erased.code, erased.out) == (1, f"does not match: run {runs[0]}, event 1: missing: all of its events are "
                                            "gone\n")
    assert only_the_cut.code == 1
    assert only_the_cut.out.startswith(f"does not match: run {runs[1]}, event 6: missing: events 6 to ")
