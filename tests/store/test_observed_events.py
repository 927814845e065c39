"""What the observer (logs, metrics, traces) hears of an approval is what the audit log keeps: each
event is built once, by the transition that writes it, and handed on as written, on memory, SQLite
and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from store_harness import APPROVER, REQUESTER, ManualClock, make_tools, scripted_policies

from signoff.runtime.ports import Store
from signoff.runtime.records import Decided, RunRecord
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig

APPROVAL_EVENTS = frozenset({"approval_recorded", "approval_vote_recorded", "approval_expired", "grant_created"})


class Watched:
    """An observer that keeps every event it is shown."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def observe(self, run: RunRecord, events: Sequence[Mapping[str, Any]]) -> None:
        self.events.extend(dict(event) for event in events)


def watched_runner(store: Store, effects: Path) -> tuple[Runner, Watched]:
    watched = Watched()
    config = RunnerConfig(model="scripted:send", lease=timedelta(seconds=30))
    return Runner(store, make_tools(effects), scripted_policies, config, observer=watched), watched


def kept(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's approval events as the audit log keeps them, as an observer is shown them."""
    return [{**{k: v for k, v in event.items() if k not in ("seq", "at")}, "run_id": run_id}
            for event in store.timeline(run_id) if event["type"] in APPROVAL_EVENTS]


def heard(watched: Watched) -> list[dict[str, Any]]:
    return [event for event in watched.events if event["type"] in APPROVAL_EVENTS]


def test_a_decision_is_heard_as_it_was_written(store: Store, effects: Path) -> None:
    runner, watched = watched_runner(store, effects)
    run = runner.start_run("tell Ana her refund is approved", REQUESTER)
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    assert approval is not None

    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True, "fine"), Decided)

    [recorded] = kept(store, run.run_id)
    assert heard(watched) == [recorded]
    assert recorded["tool"] == approval.tool and recorded["by"] == APPROVER and recorded["waited_seconds"] >= 0


def test_an_expiry_the_sweep_makes_or_a_late_click_notices_is_heard_as_it_was_written(
        store: Store, effects: Path, clock: ManualClock) -> None:
    runner, watched = watched_runner(store, effects)
    swept, clicked = (runner.start_run(f"tell Ana, {n}", REQUESTER) for n in ("swept", "clicked"))
    for run in (swept, clicked):
        assert runner.execute(run.run_id) == "awaiting_approval"
    late = runner.pending_approval(clicked.run_id)
    assert late is not None
    clock.advance(days=2)

    runner.decide(late.approval_id, late.digest, APPROVER, True)  # noticed by the click: expired now
    runner.expire_due(end_run=lambda run_id: None)  # the other, by the sweep

    assert heard(watched) == kept(store, clicked.run_id) + kept(store, swept.run_id)
    expiries = heard(watched)
    assert [e["type"] for e in expiries] == ["approval_expired", "approval_expired"]
    assert expiries[0]["noticed_by"] == APPROVER and "noticed_by" not in expiries[1]
    assert all(e["waited_seconds"] == (late.expires_at - late.requested_at).total_seconds() for e in expiries)
