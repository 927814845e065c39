"""The memory store's writes of approvals, grants and the execution ledger, each atomic under its lock.

An approval is handed to a transition of `runtime/approval.py` and the `Change` kept whole
(`_save`), as the SQL store saves it; a call starts only through `begin_execution`, fenced on the
run's lease.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from signoff.runtime.adapters.memory_notices import MemoryNotices
from signoff.runtime.adapters.memory_reads import newest_first
from signoff.runtime.adapters.memory_rows import (
    Execution,
    Run,
    freeze,
    thaw,
)
from signoff.runtime.adapters.starting_calls import StartingCall
from signoff.runtime.approval import (
    dispatch,
    use_grant,
)
from signoff.runtime.approval_change import Change
from signoff.runtime.approval_events import as_events
from signoff.runtime.approval_unit import Due
from signoff.runtime.break_glass import unreviewed
from signoff.runtime.errors import Conflict
from signoff.runtime.events import execution_retried, grant_revoked
from signoff.runtime.notices import retried_call_notices
from signoff.runtime.receipts import SigningKey
from signoff.runtime.records import (
    ApprovalRecord,
    ExecutionStart,
    Existing,
    Fresh,
    GrantRecord,
    Restart,
    Ungranted,
)
from signoff.runtime.rules import (
    claimable,
    execution_started,
    is_retry_request,
)
from signoff.runtime.state import call_digest, canonical_json

_Kept = TypeVar("_Kept", ApprovalRecord, GrantRecord)


class MemoryApprovals(MemoryNotices):
    """Approvals, grants and the execution ledger: their writes."""

    def _save(self, run: Run | None, changes: Iterable[Change]) -> list[ApprovalRecord]:
        """Keep `changes` whole, as `approval_rows.save_changes` writes them: each approval as it is
        now, the grant it made, and its events on its run (`run`, or the approval's own)."""
        now = self.now()
        saved = []
        for change in changes:
            self._approvals[change.after.approval_id].record = copied(change.after)
            if change.grant is not None:
                self._grants[change.grant.grant_id] = copied(change.grant)
            (run or self._run(change.after.run_id)).append(as_events(change.events), now)
            self._owe(change.after.run_id, change.notices, now)
            saved.append(self._approvals[change.after.approval_id].out())
        return saved

    # -- the execution ledger --------------------------------------------------------------

    def begin_execution(self, run_id: str, tool: str, args: dict[str, Any], key: str, *, owner: str,
                        lease: timedelta, dispatch_window: timedelta,
                        restart: Restart | None = None, allowed_by: str | None = None,
                        granted_by: str | None = None, preview: str | None = None,
                        signer: SigningKey | None = None, policy: str | None = None) -> ExecutionStart:
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None or run.lease_owner != owner or run.lease_expires_at is None or run.lease_expires_at <= now:
                raise Conflict(f"run {run_id}: this worker no longer holds its lease; {key} was not started")
            run.lease_expires_at = now + lease
            existing = self._executions.get(key)
            if existing is not None:
                return self._restart(run, tool, existing, restart, now)
            call = StartingCall(run_id, run.requester, tool, args, key, call_digest(tool, args, key, preview), now,
                                preview, policy, signer)
            if granted_by is not None:
                return self._start_granted(run, call, granted_by)
            if allowed_by is not None:  # the policy let it run without a person: no approval to consume
                self._keep_receipt(call.receipt("allowed", allowed_by))
                return self._started(run, call, allowed_by=allowed_by)
            return self._start_approved(run, call, dispatch_window)

    def _start_granted(self, run: Run, call: StartingCall, granted_by: str) -> ExecutionStart:
        """Start a call under the grant `granted_by`, if it still covers it: its use counted, its receipt kept."""
        grant = use_grant(self._grants.get(granted_by), granted_by, run_id=call.run_id, requester=call.requester,
                          tool=call.tool, args=call.args, now=call.now)
        if isinstance(grant, Ungranted):
            return grant
        self._grants[granted_by] = grant
        self._keep_receipt(call.receipt("granted", grant.rule, grant_id=granted_by))
        return self._started(run, call, granted_by=granted_by, grant_use=grant.uses)

    def _start_approved(self, run: Run, call: StartingCall, window: timedelta) -> ExecutionStart:
        """Start a call a person approved within `window`, using its approval up; or say why not (an
        approval approved too long ago is marked expired)."""
        latest = newest_first([a for a in self._by_key.get(call.key, []) if a.record.status != "superseded"],
                              "requested_at")
        used = dispatch(latest[0].out() if latest else None, run_id=call.run_id, key=call.key, digest=call.digest,
                        now=call.now, window=window)
        if isinstance(used, tuple):
            refusal, expired = used
            self._save(run, [expired] if expired is not None else [])
            return refusal
        self._save(run, [used])
        return self._started(run, call, approval_id=used.after.approval_id)

    def _keep_receipt(self, receipt: dict[str, Any] | None) -> None:
        if receipt is not None:
            self._receipts.append(receipt)

    def _started(self, run: Run, call: StartingCall, **why: str | int) -> Fresh:
        """The ledger row of a call starting now, its first attempt, with the event saying what let it."""
        self._executions[call.key] = Execution(key=call.key, run_id=run.run_id, tool=call.tool, digest=call.digest,
                                               status="started", attempts=1, started_at=call.now,
                                               added=next(self._added))
        run.append([execution_started(call.key, call.tool, **why)], call.now)
        return Fresh(1)

    def _restart(self, run: Run, tool: str, existing: Execution, restart: Restart | None,
                 now: datetime) -> ExecutionStart:
        """The ledger already has the key: its outcome, or a restart `restart` allows."""
        if existing.status != "started" or restart is None:
            return Existing(existing.status, thaw(existing.result), existing.error)
        version = by = None
        if restart == "requested":
            request = thaw(run.command)
            if not is_retry_request(request):
                return Existing(existing.status, None, None)  # the request was used up already: ask again
            version = run.version = run.version + 1
            by = request.get("by")
            run.command = None
            self._owe(run.run_id, retried_call_notices(run.status), now)
        existing.attempts += 1
        existing.started_at, existing.finished_at = now, None
        run.append([execution_retried(existing.key, tool, existing.attempts, restart, by)], now)
        return Fresh(existing.attempts, version)

    def complete_execution(self, execution: dict[str, Any]) -> None:
        with self._lock:
            self._finish(execution, self.now())

    def _finish(self, execution: dict[str, Any], now: datetime) -> None:
        row = self._executions.get(execution["key"])
        if row is not None:
            row.finish(execution, now)

    # -- approvals and break-glass ------------------------------------------------------

    @contextmanager
    def approval_unit(self) -> Iterator[MemoryApprovalUnit]:
        """The store held for one command; what it saved kept when it ends, and nothing if it raises."""
        with self._lock:
            unit = MemoryApprovalUnit(self, self.now())
            yield unit
            self._save(None, unit.changes)
            self._receipts.extend(unit.receipts)
            for run_id, (owner, until) in unit.leases.items():
                self._runs[run_id].lease_owner, self._runs[run_id].lease_expires_at = owner, until

    def set_glass_message(self, approval_id: str, message: dict[str, Any]) -> None:
        with self._lock:
            if approval_id in self._approvals:
                self._approvals[approval_id].change(glass_message=thaw(freeze(message)))

    def unreviewed_glass(self, limit: int = 100) -> list[ApprovalRecord]:
        with self._lock:
            chosen = [a for a in self._approvals.values() if unreviewed(a.record)]
            return [a.out() for a in sorted(chosen, key=lambda a: a.record.decided_at or a.record.requested_at)[:limit]]

    def revoke_grant(self, grant_id: str, user: str) -> GrantRecord | None:
        with self._lock:
            grant = self._grants.get(grant_id)
            if grant is None or grant.revoked_at is not None:
                return grant
            now = self.now()
            revoked = self._grants[grant_id] = dataclasses.replace(grant, revoked_at=now, revoked_by=user)
            self._run(grant.run_id).append([grant_revoked(grant_id, user)], now)
            return revoked

    def set_approval_message(self, approval_id: str, message: dict[str, Any]) -> ApprovalRecord | None:
        with self._lock:
            approval = self._approvals.get(approval_id)
            if approval is None:
                return None
            return approval.change(message=thaw(freeze(message)))


class MemoryApprovalUnit:
    """What one command read of `store` (which it holds), and what it saves, kept once it ends."""

    def __init__(self, store: MemoryApprovals, now: datetime) -> None:
        self.store, self.now = store, now
        self.changes: list[Change] = []
        self.receipts: list[dict[str, Any]] = []
        self.leases: dict[str, tuple[str, datetime]] = {}

    def approval(self, approval_id: str) -> ApprovalRecord | None:
        approval = self.store._approvals.get(approval_id)
        return approval.out() if approval is not None else None

    def due(self, which: Due, limit: int | None = None) -> list[ApprovalRecord]:
        """As the SQL store's index picks them (`SqlApprovalUnit.due`), in the same order."""
        moment = {Due.EXPIRY: _expires_at, Due.NUDGE: _nudge_at, Due.GLASS: _glass_due_at}[which]
        found = sorted(((at, a.out()) for a in self.store._approvals.values()
                        if (at := moment(a.record, self.now)) is not None), key=lambda pair: pair[0])
        return [approval for _, approval in found][:limit]

    def save(self, changes: Sequence[Change]) -> None:
        self.changes += changes

    def keep_receipt(self, receipt: Mapping[str, Any]) -> None:
        self.receipts.append(dict(receipt))

    def take_lease(self, run_id: str, owner: str, lease: timedelta) -> bool:
        run = self.store._run(run_id)
        if not (claimable(run.status, run.command) and run.free(self.now)):
            return False
        self.leases[run_id] = (owner, self.now + lease)
        return True


def _expires_at(approval: ApprovalRecord, now: datetime) -> datetime | None:
    return approval.expires_at if approval.status == "pending" and approval.expires_at <= now else None


def _nudge_at(approval: ApprovalRecord, now: datetime) -> datetime | None:
    at = approval.nudge_at
    return at if approval.status == "pending" and at is not None and at <= now < approval.expires_at else None


def _glass_due_at(approval: ApprovalRecord, now: datetime) -> datetime | None:
    at = approval.glass_due_at
    return at if at is not None and at <= now and approval.glass_review is None else None


def copied(value: _Kept) -> _Kept:
    """`value` with its JSON fields copied through canonical JSON, so nothing the caller holds is
    shared with what the store keeps (as a row read back from a database is a fresh value)."""
    copies = {name: thaw(canonical_json(getattr(value, name))) for name in ("args", "asked", "asked_with", "message", "same", "glass",
                                                                     "glass_review", "glass_message")
              if hasattr(value, name) and getattr(value, name) is not None}
    return dataclasses.replace(value, **copies)
