"""Telling people: every post and update goes through the `Notifier`, the store records what each
message shows, and `resync` puts right what a crash or an outage left untold. Slack follows the
database, never the other way round. What is committed is shown to the `Observer` (logs, metrics,
traces) the same way: after the fact, and never at the cost of a run.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from signoff.runtime.approval import offers_grant
from signoff.runtime.caller_runs import MODEL as CALLER_MODEL
from signoff.runtime.cards import ALONE, Card, calls_in_force, made_by
from signoff.runtime.digests import batch_place
from signoff.runtime.events import event as audit_event
from signoff.runtime.failpoints import Failpoints
from signoff.runtime.ports import Store
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.schema import STOPPED, TERMINAL
from signoff.runtime.telling_ports import Notifier, Observer

log = logging.getLogger("signoff.runner")

CARD_CALLS_LOOKED_AT = 200
"""A run's newest approvals searched for the calls of a turn's card (a turn makes at most eight,
each replaced by at most a few edits and reconsiderations)."""
GRANTS_LOOKED_AT = 200
"""A run's newest grants searched for the one an approval made."""
ENDINGS: frozenset[str] = TERMINAL | STOPPED
"""Statuses people are told about when a run reaches them."""
FAILED = object()
"""What `notify` returns when the notifier raised."""


class Teller:
    """Tells the notifier what happened and remembers, in the store, what it has been told."""

    def __init__(self, store: Store, notifier: Notifier | None, *, failpoints: Failpoints, worker_id: str,
                 lease: timedelta, observer: Observer | None = None) -> None:
        self.store, self.notifier, self.failpoints = store, notifier, failpoints
        self.observer = observer
        self.worker_id, self.lease = worker_id, lease
        self._unrecorded: dict[str, dict[str, Any]] = {}
        """Cards posted whose place the database could not record (it failed right then), by approval
        id: recovery records them instead of posting a second card, whose first copy would keep
        live buttons nobody ever takes away."""
        self._unrecorded_lock = threading.Lock()

    @property
    def tells(self) -> bool:
        """Whether anyone is told of runs (a notifier), so there are posts and endings to make."""
        return self.notifier is not None

    def observe(self, run: RunRecord, events: Sequence[Mapping[str, Any]]) -> None:
        """Show the observer what a commit wrote; its failure is logged, never fatal (it only watches)."""
        if self.observer is None or not events:
            return
        events = [event if "run_id" in event else {**event, "run_id": run.run_id} for event in events]
        try:
            self.observer.observe(run, events)
        except Exception as exc:  # a broken log handler or exporter must not stop or fail a run
            log.warning("run %s: observer failed: %s: %s", run.run_id, type(exc).__name__, exc)

    def announce(self, run: RunRecord) -> RunRecord:
        """Post the run message; progress threads under it, so the run carries where it is. A
        caller's run is announced only once it asks a person (`post_approvals`), or stops for one."""
        return run if self._asks_nobody(run) else self._announce(run)

    def _asks_nobody(self, run: RunRecord) -> bool:
        """A caller's run that has asked nobody (the policy decided its calls alone): nothing of it
        is posted unless it stops for a person, so a program's reads do not fill the channel; the
        audit log and the metrics keep it all."""
        return run.model == CALLER_MODEL and not self.store.list_approvals(run_id=run.run_id, limit=1)

    def _announce(self, run: RunRecord) -> RunRecord:
        ref = self.notify("run_started", run)
        if not (isinstance(ref, dict) and ref):
            return run
        origin = {**run.origin, **ref}
        self.store.update_origin(run.run_id, origin)
        return dataclasses.replace(run, origin=origin)

    def tool_result(self, run: RunRecord, entry: dict[str, Any]) -> None:
        """Tell the result of one call, with the grant that let it start unasked, if one did."""
        if run.origin.get("ts") or not self._asks_nobody(run):
            grant_id = entry.get("grant")
            grant = self.store.get_grant(grant_id) if isinstance(grant_id, str) else None
            self.notify("tool_result", run, entry, grant)

    def post_approvals(self, run: RunRecord, approvals: Sequence[ApprovalRecord]) -> None:
        """Post the approvals one step opened: one card, or one card for every call of a turn (a
        caller's run is announced first, now that it asks someone)."""
        if run.model == CALLER_MODEL and not run.origin.get("ts"):
            run = self._announce(run)
        if len(approvals) == 1:
            self.post_approval(run, approvals[0])
            return
        self.failpoints.hit("before_approval_post")
        ref = self.notify("batch_requested", run, list(approvals))
        if isinstance(ref, dict) and ref:
            for approval in approvals:
                self._record_post(run, approval.approval_id, ref)

    def post_approval(self, run: RunRecord, approval: ApprovalRecord) -> None:
        if run.model == CALLER_MODEL and not run.origin.get("ts"):
            run = self._announce(run)
        self.failpoints.hit("before_approval_post")
        ref = self.notify("approval_requested", run, approval, self.card_of(run, approval))
        if isinstance(ref, dict) and ref:
            self._record_post(run, approval.approval_id, ref)

    def _record_post(self, run: RunRecord, approval_id: str, ref: dict[str, Any]) -> None:
        try:
            now = self.store.set_approval_message(approval_id, ref)
        except Exception:  # the database failed; the card is in Slack all the same: remember where
            with self._unrecorded_lock:
                self._unrecorded[approval_id] = ref
            raise
        with self._unrecorded_lock:
            self._unrecorded.pop(approval_id, None)
        # A click can land between the post and recording where it went: show what it decided.
        if now is not None and now.status != "pending":
            self.show_approval(run, now)

    def show_approval(self, run: RunRecord, approval: ApprovalRecord) -> None:
        """Show on the approval's message the outcome a click landed on before the message's place
        was recorded (the redraw its decision owes waits for that place: `relay.Relay`)."""
        if self.notifier is not None:
            self.notify("approval_decided", run, approval, self.card_of(run, approval))

    def card_of(self, run: RunRecord, approval: ApprovalRecord) -> Card:
        """What `approval`'s card shows besides it, read here so that no notifier reads the store:
        a turn's card, its calls in force; a decided call's, its receipt and the grant it made."""
        if batch_place(approval.key) is not None:
            found = self.store.list_approvals(run_id=run.run_id, limit=CARD_CALLS_LOOKED_AT)
            return Card(calls=calls_in_force(found, approval))
        if approval.status == "pending":
            return ALONE
        grant = None
        if approval.status in ("approved", "consumed") and offers_grant(approval):
            grant = made_by(self.store.list_grants(live=False, run_id=run.run_id, limit=GRANTS_LOOKED_AT), approval)
        return Card(grant=grant, receipt=self.store.receipt_of(approval_id=approval.approval_id))

    def tell_end(self, run: RunRecord, *, remember: bool = True) -> str | None:
        """Tell people how the run ended; returns the status they were told, if they were.

        `remember=False` leaves recording it to the caller (a worker does it as it lets go of the run).
        """
        method = "run_finished" if run.status == "done" else "run_stopped"
        if self.notifier is None or run.status not in ENDINGS:
            return None
        if run.model == CALLER_MODEL and not run.origin.get("ts"):
            if run.status != "done" or not self._asks_nobody(run):
                run = self._announce(run)  # stopped for a person (an unknown outcome): told in full
                if self.notify(method, run) is FAILED:
                    return None
        elif self.notify(method, run) is FAILED:
            return None
        if remember:
            self.store.mark_run_shown(run.run_id, run.status)
        return run.status

    def notify(self, method: str, run: RunRecord, *args: Any) -> Any:
        """Tell the notifier; a failure is logged and audited, never fatal (the database is the truth).

        Returns what the notifier returned, or `FAILED`; `resync` retries what failed.
        """
        if self.notifier is None:
            return None
        try:
            return getattr(self.notifier, method)(run, *args)
        except Exception as exc:  # Slack being down must not lose or stall a run
            log.warning("run %s: notifier.%s failed: %s", run.run_id, method, exc)
            event = audit_event("notify_failed", method=method, error=f"{type(exc).__name__}: {exc}"[:500])
            self.store.append_event(run.run_id, event)
            self.observe(run, [{**event, "run_id": run.run_id}])
            return FAILED

    # -- after a crash or an outage ---------------------------------------------------------

    def resync(self, min_age: timedelta) -> None:
        """Re-post approvals whose post failed (once older than `min_age`) and re-tell endings nobody
        heard of (a card's redraws are the outbox's: `relay.Relay`)."""
        if self.notifier is None:
            return
        with self._unrecorded_lock:
            unrecorded = list(self._unrecorded.items())
        for approval_id, ref in unrecorded:  # first, and without waiting: no other replica knows of them
            approval = self.store.get_approval(approval_id)
            run = self.store.get_run(approval.run_id, history=False) if approval is not None else None
            if approval is None or approval.message is not None or not _readable(run):
                with self._unrecorded_lock:
                    self._unrecorded.pop(approval_id, None)
                continue
            assert run is not None
            self._holding(run.run_id, functools.partial(self._record_post, run, approval_id, ref))
        # A run whose state cannot be read is skipped (and logged), never allowed to stop the pass:
        # the other runs' messages and recoveries come after it.
        unposted = self.store.list_approvals(status="pending", unposted=True, older_than=min_age)
        runs = self.store.runs_by_id([a.run_id for a in unposted])
        for approval in unposted:
            if _readable(runs.get(approval.run_id)):
                self._holding(approval.run_id, functools.partial(self._repost, runs[approval.run_id],
                                                                 approval.approval_id))
        for run in self.store.runs_out_of_sync(tuple(sorted(ENDINGS))):
            if _readable(run):
                self._holding(run.run_id, functools.partial(self._retell_end, run.run_id))

    def _holding(self, run_id: str, errand: Callable[[], None]) -> None:
        """Run `errand` holding the run's lease, or skip it if a live worker or replica holds the run.

        A new post (an approval card, a run's ending) must be made once: not by two replicas'
        recoveries at once, nor while the run's own worker is making it (it posts before it lets go).
        """
        owner = f"{self.worker_id}/resync-{secrets.token_hex(3)}"
        if not self.store.hold(run_id, owner, self.lease):
            return
        try:
            errand()
        finally:
            self.store.release(run_id, owner)

    def _repost(self, run: RunRecord, approval_id: str) -> None:
        approval = self.store.get_approval(approval_id)  # again, now held: another replica may have posted it
        if approval is not None and approval.status == "pending" and approval.message is None:
            self.post_approval(run, approval)

    def _retell_end(self, run_id: str) -> None:
        run = self.store.get_run(run_id, history=False)
        if run is not None and run.status in ENDINGS and run.shown_status != run.status:
            self.tell_end(run)


def _readable(run: RunRecord | None) -> bool:
    if run is not None and run.unreadable:
        skip_unreadable(run.run_id, run.unreadable)
    return run is not None and not run.unreadable


def skip_unreadable(run_id: str, problem: object) -> None:
    log.error("run %s is skipped: its stored state cannot be read (%s); "
              "`signoff runs` lists it, and it needs an operator", run_id, problem)
