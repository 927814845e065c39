"""Driving runs as people would: start them with `/signoff`, click the buttons Slack shows, and keep
at it until every run has ended or waits on a decision only a person can make.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scenarios.serve import Serve, buttons
from scenarios.world import wait_until
from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    RECONCILE_DONE_ACTION,
    RECONCILE_RETRY_ACTION,
    RETRY_ACTION,
)
from signoff.bot.slack.payloads import run_value
from signoff.runtime.state import STOPPED, TERMINAL

RUN_ID = re.compile(r"run-[0-9a-f]{10}")
REQUESTER = "U0ASKER"
APPROVER = "U0LEAD"


def started_run(reply_text: str) -> str:
    found = RUN_ID.search(reply_text)
    if not found:
        raise AssertionError(f"the slash command did not start a run: {reply_text[:300]}")
    return found.group(0)


def messages_with(world: Any, action_id: str, value_prefix: str = "") -> list[dict[str, Any]]:
    """The messages in Slack showing button `action_id` with a value starting with `value_prefix`, oldest first."""
    with world.slack._lock:
        messages = [dict(m) for m in world.slack.messages.values()]
    return [m for m in messages if any(a == action_id and v.startswith(value_prefix) for a, v in buttons(m))]


def message_with(world: Any, action_id: str, value_prefix: str) -> dict[str, Any] | None:
    """The newest message showing button `action_id` whose value starts with `value_prefix`."""
    found = messages_with(world, action_id, value_prefix)
    return found[-1] if found else None


def pending_approval(world: Any, run_id: str) -> Any:
    """The run's pending approval, posted or not; None if it has none."""
    found = world.db.store.list_approvals(run_id=run_id, status="pending", limit=1)
    return found[0] if found else None


def posted_approval(world: Any, run_id: str) -> Any:
    """The run's latest approval whose card Slack shows (whatever its status); None if none yet."""
    for approval in world.db.store.list_approvals(run_id=run_id, limit=5):
        if approval.message:
            return approval
    return None


ENDED = TERMINAL | STOPPED
"""Where a run driven by a scenario stops moving on its own: terminal, or waiting for a person."""


def has_ended(world: Any, run_id: str, statuses: frozenset[str] = ENDED) -> bool:
    run = world.db.store.get_run(run_id, history=False)
    return run is not None and run.status in statuses


def approval_message(world: Any, approval_id: str) -> dict[str, Any] | None:
    return message_with(world, APPROVE_ACTION, approval_id + ":")


@dataclass
class Driver:
    """Settles runs by clicking what a diligent approver would click, re-clicking what got lost."""

    world: Any
    pick: Callable[[], Serve]
    approver: str = APPROVER
    requester: str = REQUESTER
    reclick_after: float = 4.0
    tell_within: float = 8.0
    """How long Slack may take to show a stopped run's buttons before we count the person as never told."""
    faults_until: float = 0.0
    """When (monotonic) the scenario's faults stop: while the database keeps failing, telling can
    fail as often, so the `tell_within` clock starts no earlier than this."""
    clicks: int = 0
    _last: dict[str, float] = field(default_factory=dict)
    _seen: dict[str, float] = field(default_factory=dict)

    def start(self, goal: str, serve: Serve | None = None, *, find_within: float = 10.0) -> str:
        before = {r.run_id for r in self.world.db.store.list_runs(requester=self.requester, limit=1000)}
        try:
            reply = (serve or self.pick()).command(goal, self.requester)
        except OSError:
            # The replica died before its answer left (Slack would say "operation_timeout"): the run
            # may be recorded all the same, and recovery carries it on. Find it as the person would,
            # with `/signoff status`; if none was recorded, the command really failed.
            return wait_until(lambda: self._new_run(before), find_within, what="the run the lost command started")
        if reply.status != 200:
            raise AssertionError(f"/signoff answered {reply.status}: {reply.body[:300]}")
        return started_run(reply.text)

    def _new_run(self, before: set[str]) -> str | None:
        runs = self.world.db.store.list_runs(requester=self.requester, limit=1000)
        return next((r.run_id for r in runs if r.run_id not in before), None)

    def settle(self, run_ids: list[str], timeout: float, *, on_tick: Callable[[], None] | None = None,
               stop_at: frozenset[str] = frozenset({"budget_exhausted"})) -> bool:
        """Act on each run until all ended (or reached `stop_at`); False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        open_runs = list(run_ids)
        while open_runs and time.monotonic() < deadline:
            if on_tick is not None:
                on_tick()
            open_runs = [r for r in open_runs if not self._step(r, stop_at)]
            if open_runs:
                time.sleep(0.05)
        return not open_runs

    def _step(self, run_id: str, stop_at: frozenset[str]) -> bool:
        run = self.world.db.store.get_run(run_id, history=False)
        if run is None:
            return False
        if run.status in TERMINAL or run.status in stop_at:
            return True
        match run.status:
            case "awaiting_approval":
                approval = self.world.db.store.approval_for_key(run.state["pending"]["key"])
                if approval is not None and approval.status == "pending":
                    message = approval_message(self.world, approval.approval_id)
                    if message is not None:
                        self._click(approval.approval_id, message, APPROVE_ACTION, self.approver)
            case "needs_reconciliation":
                key = run.state["pending"]["key"]
                ran = any(line.get("key") == key for line in self.world.effect_lines())
                self._run_button(run_id, RECONCILE_DONE_ACTION if ran else RECONCILE_RETRY_ACTION, self.approver)
            case "failed":
                self._run_button(run_id, RETRY_ACTION, self.requester)
        return False

    def _run_button(self, run_id: str, action_id: str, user: str) -> None:
        what = f"{run_id}:{action_id}"
        message = self.message_for_run(run_id, action_id)
        if message is None:
            first = max(self._seen.setdefault(what, time.monotonic()), self.faults_until)
            if time.monotonic() - first < self.tell_within:
                return
            if what not in self.world.untold:  # checked with the invariants (I6)
                self.world.untold.append(what)
            run = self.world.db.store.get_run(run_id, history=False)
            origin = run.origin if run is not None else {}
            # As a person who found the run with `/signoff status` would: the same button, by hand.
            value = run_value(run_id, run.version if run is not None else 0)
            message = {"channel": origin.get("channel", "C0RUNS"), "ts": origin.get("ts", "1.1"), "blocks": [
                {"type": "actions", "elements": [{"action_id": action_id, "value": value,
                                                  "text": {"type": "plain_text", "text": "button"}}]}]}
        self._click(what, message, action_id, user)

    def message_for_run(self, run_id: str, action_id: str) -> dict[str, Any] | None:
        return message_with(self.world, action_id, run_id)

    def _click(self, what: str, message: dict[str, Any], action_id: str, user: str) -> None:
        now = time.monotonic()
        if now - self._last.get(what, -1e9) < self.reclick_after:
            return
        self._last[what] = now
        try:
            self.pick().click(message, action_id, user)
            self.clicks += 1
        except OSError:
            self._last.pop(what, None)  # the replica just died; try again on the next pass
