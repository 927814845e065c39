"""The memory store's writes of approvals, grants and the execution ledger, each atomic under its lock.

The commands that change approvals and start calls (`approval_commands`, `starting_calls`) run in
the unit of work `approval_unit` opens (`MemoryApprovalUnit`), and a `Change` is kept whole
(`_save`) as the SQL store saves it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from signoff.runtime.adapters.memory_notices import MemoryNotices
from signoff.runtime.adapters.memory_reads import newest_first
from signoff.runtime.adapters.memory_rows import (
    Approval,
    Execution,
    Run,
    freeze,
    thaw,
)
from signoff.runtime.approval_change import Change
from signoff.runtime.approval_events import as_events
from signoff.runtime.approval_unit import Due, HeldRun, LedgerRow
from signoff.runtime.break_glass import unreviewed
from signoff.runtime.events import grant_revoked
from signoff.runtime.notices import Notice
from signoff.runtime.records import ApprovalRecord, GrantRecord
from signoff.runtime.rules import claimable
from signoff.runtime.state import canonical_json

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

    def _keep_opened(self, record: ApprovalRecord) -> None:
        approval = Approval(copied(record), next(self._added))
        self._approvals[record.approval_id] = approval
        self._by_key.setdefault(record.key, []).append(approval)

    # -- the execution ledger --------------------------------------------------------------

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
        """The store held for one command; what it wrote kept, in order, when it ends, and nothing
        if it raises."""
        with self._lock:
            unit = MemoryApprovalUnit(self, self.now())
            yield unit
            for write in unit.writes:
                write()

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
    """What one command reads of `store` (which it holds), and the writes it makes, kept in order
    once it ends. Its reads see the store as the command began: no command reads what it wrote
    (each of `approval_commands` and `starting_calls` reads a row, then changes it)."""

    def __init__(self, store: MemoryApprovals, now: datetime) -> None:
        self.store, self.now = store, now
        self.writes: list[Callable[[], object]] = []

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
        kept = list(changes)
        self.writes.append(lambda: self.store._save(None, kept))

    def keep_receipt(self, receipt: Mapping[str, Any]) -> None:
        self.writes.append(functools.partial(self.store._receipts.append, dict(receipt)))

    def take_lease(self, run_id: str, owner: str, lease: timedelta) -> bool:
        run = self.store._run(run_id)
        if not (claimable(run.status, run.command) and run.free(self.now)):
            return False
        self.writes.append(functools.partial(_lease, run, owner, self.now + lease))
        return True

    def run(self, run_id: str) -> HeldRun | None:
        run = self.store._runs.get(run_id)
        return HeldRun(run.requester, run.status, run.version, thaw(run.command)) if run is not None else None

    def of_run(self, run_id: str, statuses: Sequence[str]) -> list[ApprovalRecord]:
        return _asked_order(a for a in self.store._approvals.values()
                            if a.record.run_id == run_id and a.record.status in statuses)

    def under_key(self, key: str) -> list[ApprovalRecord]:
        return _asked_order(self.store._by_key.get(key, []))

    def open_approval(self, approval: ApprovalRecord) -> None:
        self.writes.append(functools.partial(self.store._keep_opened, approval))

    def leave_command(self, run_id: str, command: dict[str, Any]) -> None:
        self.writes.append(functools.partial(_leave, self.store._run(run_id), canonical_json(command), self.now))

    def renew_lease(self, run_id: str, owner: str, lease: timedelta) -> HeldRun | None:
        run = self.store._runs.get(run_id)
        if run is None or run.lease_owner != owner or run.lease_expires_at is None or run.lease_expires_at <= self.now:
            return None
        self.writes.append(functools.partial(_lease, run, owner, self.now + lease))
        return HeldRun(run.requester, run.status, run.version, thaw(run.command))

    def execution(self, key: str) -> LedgerRow | None:
        row = self.store._executions.get(key)
        return LedgerRow(row.key, row.status, row.attempts, thaw(row.result), row.error) if row is not None else None

    def latest_approval(self, key: str) -> ApprovalRecord | None:
        latest = newest_first([a for a in self.store._by_key.get(key, []) if a.record.status != "superseded"],
                              "requested_at")
        return latest[0].out() if latest else None

    def grant(self, grant_id: str) -> GrantRecord | None:
        return self.store._grants.get(grant_id)

    def save_grant_use(self, grant: GrantRecord) -> None:
        self.writes.append(functools.partial(self.store._grants.__setitem__, grant.grant_id, copied(grant)))

    def start_execution(self, run_id: str, key: str, tool: str, digest: str) -> None:
        store, now = self.store, self.now
        self.writes.append(lambda: store._executions.__setitem__(key, Execution(
            key=key, run_id=run_id, tool=tool, digest=digest, status="started", attempts=1, started_at=now,
            added=next(store._added))))

    def restart_execution(self, key: str, attempts: int) -> None:
        self.writes.append(functools.partial(_restart, self.store._executions[key], attempts, self.now))

    def use_up_command(self, run_id: str, version: int) -> None:
        self.writes.append(functools.partial(_use_up, self.store._run(run_id), version))

    def append(self, run_id: str, events: list[dict[str, Any]]) -> None:
        self.writes.append(functools.partial(self.store._run(run_id).append, events, self.now))

    def owe(self, run_id: str, notices: Iterable[Notice]) -> None:
        self.writes.append(functools.partial(self.store._owe, run_id, tuple(notices), self.now))


def _asked_order(chosen: Iterable[Approval]) -> list[ApprovalRecord]:
    """Oldest first, and the approvals a step asked at once by id (`sql_approval_unit.ASKED_ORDER`)."""
    return [a.out() for a in sorted(chosen, key=lambda a: (a.record.requested_at, a.record.approval_id))]


def _lease(run: Run, owner: str, until: datetime) -> None:
    run.lease_owner, run.lease_expires_at = owner, until


def _restart(execution: Execution, attempts: int, now: datetime) -> None:
    execution.attempts, execution.started_at, execution.finished_at = attempts, now, None


def _leave(run: Run, command: str, now: datetime) -> None:
    run.command, run.updated_at = command, now


def _use_up(run: Run, version: int) -> None:
    run.command, run.version = None, version


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
