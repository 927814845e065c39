"""`signoff policy backtest`: runs recorded through the real runner and store under one policy,
then decided again by another through the CLI, with counts worked out by hand; on SQLite and
PostgreSQL. It reads only: a missing or unmigrated database is an error, and no file is made."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.models.scripted import ScriptedPolicy
from signoff.runtime.policy_file import parse_policy
from tests.conftest import fresh_database_url
from tests.store.store_harness import LOOKUP, SEND, SEND_ONCE, ManualClock, build_runner

LEE, KIM, ADA = "U0LEE", "U0KIM", "U0ADA"
THEN = f"""
defaults:
  approvers: [{KIM}]
rules:
  - name: mail-to-ana
    tool: {SEND}
    when: 'args.to == "ana@example.com"'
    approvers: [{LEE}]
  - name: no-mail-to-bo
    tool: {SEND}
    when: 'args.to == "bo@example.com"'
    decision: deny
"""
NOW = f"""
defaults:
  approvers: [{KIM}]
rules:
  - name: no-lookups
    tool: {LOOKUP}
    decision: deny
  - name: mail-to-ana
    tool: {SEND}
    when: 'args.to == "ana@example.com"'
    decision: allow
  - name: mail-to-bo
    tool: {SEND}
    when: 'args.to == "bo@example.com"'
    approvers: [{LEE}]
  - name: mail-elsewhere
    tool: {SEND}
    approvers: [{LEE}, {ADA}]
    quorum: 2
"""
SCRIPTS = {
    # Two reads no rule named (they ran unasked); now denied.
    "scripted:lookups": [{"tool": LOOKUP, "args": {"q": "orders"}}, {"tool": LOOKUP, "args": {"q": "refunds"}},
                         {"final": "found"}],
    # Asked of Lee; now runs unasked.
    "scripted:ana": [{"tool": SEND, "args": {"to": "ana@example.com", "body": "hi"}}, {"final": "sent"}],
    # Denied; now asked of Lee.
    "scripted:bo": [{"tool": SEND, "args": {"to": "bo@example.com"}}, {"final": "refused"}],
    # Asked of Kim by the defaults; now of Lee and Ada, two of them.
    "scripted:cy": [{"tool": SEND, "args": {"to": "cy@example.com"}}, {"final": "sent"}],
    # A side effect no rule names, then or now: asked of Kim both times.
    "scripted:dee": [{"tool": SEND_ONCE, "args": {"to": "dee@example.com"}}, {"final": "sent"}],
}
COUNTS = {"newly_allowed": 1, "newly_asked": 1, "newly_denied": 2, "changed_approvers": 1, "unchanged": 1}


def record_runs(url: str, effects: Path) -> None:
    """The runs of `SCRIPTS` under `THEN`, and one more (which would change too) 30 days ago."""
    clock = ManualClock()
    engine = make_engine(url)
    try:
        runner = build_runner(SqlStore(engine, clock=clock), effects, lease=30.0,
                              policies=lambda model: ScriptedPolicy(SCRIPTS[model], name=model),
                              approval_policy=parse_policy(THEN, source="then.yaml"))
        clock.advance(days=-30)
        _run(runner, "scripted:ana")
        clock.advance(days=30)
        for model in SCRIPTS:
            _run(runner, model)
    finally:
        engine.dispose()


def _run(runner, model: str) -> None:
    run = runner.start_run(f"goal of {model}", "U0ASK", model=model)
    runner.execute(run.run_id)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def recorded(request, tmp_path) -> Iterator[str]:
    databases = fresh_database_url(request.param, tmp_path)
    url = next(databases)
    record_runs(url, tmp_path / "effects.log")
    yield url
    next(databases, None)


@pytest.fixture
def now_policy(signoff) -> str:
    (signoff.cwd / "now.yaml").write_text(NOW)
    return "now.yaml"


def test_backtest_counts_each_change_as_worked_out_by_hand(signoff, recorded, now_policy):
    result = signoff.here("policy", "backtest", now_policy, "--database-url", recorded, "--json")

    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["counts"] == COUNTS
    changed = {(call["change"], call["tool"], call["then"]["rule"], call["now"]["rule"]) for call in report["calls"]}
    assert changed == {("newly_denied", LOOKUP, None, "no-lookups"),
                       ("newly_allowed", SEND, "mail-to-ana", "mail-to-ana"),
                       ("newly_asked", SEND, "no-mail-to-bo", "mail-to-bo"),
                       ("changed_approvers", SEND, None, "mail-elsewhere")}
    moved = next(call for call in report["calls"] if call["change"] == "changed_approvers")
    assert moved["then"] == {"decision": "ask", "rule": None, "approvers": [KIM], "quorum": 1}
    assert moved["now"] == {"decision": "ask", "rule": "mail-elsewhere", "approvers": [LEE, ADA], "quorum": 2}
    assert len(report["calls"]) == 5  # two lookups, one email of each other kind
    assert all(abs(datetime.fromisoformat(call["at"]) - datetime.now(UTC)) < timedelta(hours=1)
               for call in report["calls"])


def test_backtest_window_and_fail_on(signoff, recorded, now_policy):
    longer = signoff.here("policy", "backtest", now_policy, "--database-url", recorded, "--json", "--since", "31d")
    failing = signoff.here("policy", "backtest", now_policy, "--database-url", recorded,
                           "--fail-on", "newly-allowed", "--fail-on", "newly-denied")

    assert json.loads(longer.out)["counts"]["newly_allowed"] == 2  # the run of 30 days ago too
    assert failing.code == 1
    assert "  newly allowed: 1" in failing.lines and "  newly denied: 2" in failing.lines
    assert any(line.startswith("newly allowed: send_email in run-") and
               line.endswith("then rule mail-to-ana: ask 1 approval from U0LEE; now rule mail-to-ana: allow")
               for line in failing.lines)


def test_backtest_of_the_same_policy_changes_nothing(signoff, recorded):
    (signoff.cwd / "then.yaml").write_text(THEN)
    result = signoff.here("policy", "backtest", "then.yaml", "--database-url", recorded, "--json",
                          "--fail-on", "newly-allowed", "--fail-on", "newly-asked", "--fail-on", "newly-denied",
                          "--fail-on", "changed-approvers")

    assert result.code == 0, result.err
    assert json.loads(result.out) == {"counts": {**dict.fromkeys(COUNTS, 0), "unchanged": 6}, "calls": []}


def test_backtest_never_creates_a_database(signoff, now_policy, tmp_path):
    missing = signoff.here("policy", "backtest", now_policy, "--database-url", f"sqlite:///{tmp_path / 'none.db'}")
    (tmp_path / "empty.db").touch()
    empty = signoff.here("policy", "backtest", now_policy, "--database-url", f"sqlite:///{tmp_path / 'empty.db'}")
    default = signoff.here("policy", "backtest", now_policy)

    assert missing.code == 1 and "none.db does not exist" in missing.err
    assert not (tmp_path / "none.db").exists()
    assert empty.code == 1 and "has no Signoff tables" in empty.err
    assert (tmp_path / "empty.db").stat().st_size == 0
    assert default.code == 1 and "signoff.db does not exist" in default.err
    assert not (signoff.cwd / "signoff.db").exists()


def test_backtest_refuses_a_window_that_is_not_a_duration(signoff, now_policy):
    result = signoff.here("policy", "backtest", now_policy, "--since", "last week")

    assert result.code == 2
    assert "--since" in result.err and "'last week'" in result.err


def test_a_path_with_a_hash_in_it_is_read_where_it_is(signoff, now_policy, tmp_path):
    odd = tmp_path / "runs #1"
    odd.mkdir()
    engine = make_engine(f"sqlite:///{odd / 'signoff.db'}")
    upgrade(engine)
    engine.dispose()
    before = sorted(path.name for path in tmp_path.iterdir())
    result = signoff.here("policy", "backtest", now_policy, "--database-url", f"sqlite:///{odd / 'signoff.db'}",
                          "--json")

    assert result.code == 0, result.err
    assert json.loads(result.out)["counts"] == {**dict.fromkeys(COUNTS, 0)}
    assert sorted(path.name for path in tmp_path.iterdir()) == before  # no `runs ` file beside it
