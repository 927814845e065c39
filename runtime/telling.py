"""Telling people: every post and update goes through the `Notifier`, and the store records where
each message is. What is owed is kept in the outbox and sent through here (`relay.Relay`), so a
crash or an outage leaves nothing untold. Slack follows the database, never the other way round.
What is committed is shown to the `Observer` (logs, metrics, traces) the same way: after the
fact, and never at the cost of a run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping, Sequence
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
from signoff.runtime.telling_ports import Notifier, Observer

log = logging.getLogger("signoff.runner")

CARD_CALLS_LOOKED_AT = 200
"""A run's newest approvals searched for the calls of a turn's card (a turn makes at most eight,
each replaced by at most a few edits and reconsiderations)."""
GRANTS_LOOKED_AT = 200
"""A run's newest grants searched for the one an approval made."""
FAILED = object()
"""What `notify` returns when the notifier raised."""


class Teller:
    """Tells the notifier what happened and remembers, in the store, what it has been told."""

    def __init__(self, store: Store, notifier: Notifier | None, *, failpoints: Failpoints, worker_id: str,
                 lease: timedelta, observer: Observer | None = None) -> None:
        self.store, self.notifier, self.failpoints = store, notifier, failpoints
        self.observer = observer
        self.worker_id, self.lease = worker_id, lease
        self._unrecorded: dict[str, tuple[str, dict[str, Any]]] = {}
        """Cards posted whose place the database could not record (it failed right then), by approval
        id, with their run: recovery records them once the database is back (`record_posts`), and a
        post's next try records them instead of posting a second card (`post_approvals`)."""
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

    def announce(self, run: RunRecord) -> RunRecord | None:
        """Post the run message; progress threads under it, so the run carries where it is. A
        caller's run is announced only once it asks a person (`post_approvals`), or stops for one.
        The run as it is now (with where its message is); None if the notifier failed."""
        if run.origin.get("ts") or self._asks_nobody(run):
            return run
        ref = self.notify("run_started", run)
        return None if ref is FAILED else self._posted_at(run, ref)

    def _asks_nobody(self, run: RunRecord) -> bool:
        """A caller's run that has asked nobody (the policy decided its calls alone): nothing of it
        is posted unless it stops for a person, so a program's reads do not fill the channel; the
        audit log and the metrics keep it all."""
        return run.model == CALLER_MODEL and not self.store.list_approvals(run_id=run.run_id, limit=1)

    def _announce(self, run: RunRecord) -> RunRecord:
        return self._posted_at(run, self.notify("run_started", run))

    def _posted_at(self, run: RunRecord, ref: object) -> RunRecord:
        """The run with where its message was posted (`ref`) recorded, if it was."""
        if not (isinstance(ref, dict) and ref):
            return run
        origin = {**run.origin, **ref}
        self.store.update_origin(run.run_id, origin)
        return dataclasses.replace(run, origin=origin)

    def tool_result(self, run: RunRecord, entry: dict[str, Any]) -> bool:
        """Tell the result of one call, with the grant that let it start unasked, if one did
        (a caller's run that asks nobody tells nothing); whether it was told."""
        if not run.origin.get("ts") and self._asks_nobody(run):
            return True
        grant_id = entry.get("grant")
        grant = self.store.get_grant(grant_id) if isinstance(grant_id, str) else None
        return self.notify("tool_result", run, entry, grant) is not FAILED

    def post_approvals(self, run: RunRecord, approvals: Sequence[ApprovalRecord]) -> bool:
        """Post the approvals one step opened: one card, or one card for every call of a turn (a
        caller's run is announced first, now that it asks someone); whether they went.

        A card whose post went out but whose place the database failed to record is recorded now
        instead of posted again: its first copy would keep live buttons nobody ever takes away."""
        if run.model == CALLER_MODEL and not run.origin.get("ts"):
            run = self._announce(run)
        with self._unrecorded_lock:
            posted = {a.approval_id: self._unrecorded[a.approval_id][1] for a in approvals
                      if a.approval_id in self._unrecorded}
        for approval_id, ref in posted.items():
            self._record_post(run, approval_id, ref)
        approvals = [approval for approval in approvals if approval.approval_id not in posted]
        if not approvals:
            return True
        self.failpoints.hit("before_approval_post")
        if len(approvals) == 1:
            ref = self.notify("approval_requested", run, approvals[0], self.card_of(run, approvals[0]))
        else:
            ref = self.notify("batch_requested", run, list(approvals))
        if isinstance(ref, dict) and ref:
            for approval in approvals:
                self._record_post(run, approval.approval_id, ref)
        return ref is not FAILED

    def record_posts(self) -> None:
        """Record where the cards this process posted but could not record went (`_unrecorded`),
        as far as the database lets it now (what it still cannot is tried again next time)."""
        with self._unrecorded_lock:
            unrecorded = list(self._unrecorded.items())
        for approval_id, (run_id, ref) in unrecorded:
            try:
                run = self.store.get_run(run_id)
                if run is None:
                    with self._unrecorded_lock:
                        self._unrecorded.pop(approval_id, None)
                    continue
                self._record_post(run, approval_id, ref)
            except Exception as exc:  # the database is still down: the next recovery tries again
                log.warning("run %s: where approval %s was posted is not recorded yet: %s: %s",
                            run_id, approval_id, type(exc).__name__, exc)
                return

    def _record_post(self, run: RunRecord, approval_id: str, ref: dict[str, Any]) -> None:
        try:
            now = self.store.set_approval_message(approval_id, ref)
        except Exception:  # the database failed; the card is in Slack all the same: remember where
            with self._unrecorded_lock:
                self._unrecorded[approval_id] = (run.run_id, ref)
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

    def tell_end(self, run: RunRecord) -> bool:
        """Tell people how the run ended; whether they were told (or need not be)."""
        method = "run_finished" if run.status == "done" else "run_stopped"
        if run.model == CALLER_MODEL and not run.origin.get("ts"):
            if run.status == "done" and self._asks_nobody(run):
                return True
            run = self._announce(run)  # stopped for a person (an unknown outcome): told in full
        return self.notify(method, run) is not FAILED

    def notify(self, method: str, run: RunRecord, *args: Any) -> Any:
        """Tell the notifier; a failure is logged and audited, never fatal (the database is the truth).

        Returns what the notifier returned, or `FAILED` (the outbox tries it again: `relay.Relay`).
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


def skip_unreadable(run_id: str, problem: object) -> None:
    log.error("run %s is skipped: its stored state cannot be read (%s); "
              "`signoff runs` lists it, and it needs an operator", run_id, problem)
