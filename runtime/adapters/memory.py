"""The store in one process's memory: the contract of `ports.Store`, as the SQL store keeps it.

For tests, demos and programs that embed the runner without a database; nothing outlives the
process, and only its threads share it. One lock makes every method atomic and isolated, as a
SQL transaction is; each write checks everything first, so a refused write changes nothing.
Times come from `clock` (the wall clock by default), one clock for every lease and expiry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from signoff.runtime.adapters.ids import new_approval_id, new_grant_id
from signoff.runtime.adapters.memory_reads import MemoryReads, newest_first
from signoff.runtime.adapters.memory_rows import (
    Approval,
    Execution,
    KeyInUse,
    Run,
    freeze,
    history_rows,
    next_link,
    thaw,
    without_history,
)
from signoff.runtime.agent import Checkpoint
from signoff.runtime.approval import (
    LIVE,
    OPEN,
    ApprovalRequest,
    Change,
    cancel_pending,
    close,
    dispatch,
    expire,
    nudge,
    opened,
    overdue,
    reopen,
    supersede_by_edit,
    use_grant,
    vote,
)
from signoff.runtime.audit import SEALED_WHEN, Seal
from signoff.runtime.errors import Conflict, IncompatibleState
from signoff.runtime.records import (
    ApprovalRecord,
    ApprovalStatus,
    CommandRefusal,
    Decided,
    ExecutionStart,
    Existing,
    Fresh,
    GrantRecord,
    Missing,
    Nudged,
    Restart,
    RunRecord,
    Saved,
    Ungranted,
    Voted,
)
from signoff.runtime.rules import (
    CommandRule,
    StepWrite,
    claimable,
    command_refusal,
    execution_started,
    is_retry_request,
)
from signoff.runtime.state import call_digest, canonical_json

__all__ = ["KeyInUse", "MemoryStore"]

_Kept = TypeVar("_Kept", ApprovalRecord, GrantRecord)


class MemoryStore(MemoryReads):
    """Runs, approvals, events and the execution ledger in this process, safe across its threads:
    the reads of `MemoryReads`, and the writes, each atomic."""

    def close(self) -> None:
        """Nothing is held open: the runs live as long as this object."""

    # -- runs ----------------------------------------------------------------------------

    def create_run(self, state: dict[str, Any], *, goal: str, requester: str, origin: dict[str, Any],
                   model: str, request_id: str | None = None, lease_to: str | None = None,
                   lease: timedelta | None = None) -> RunRecord:
        with self._lock:
            if request_id is not None and request_id in self._by_request:
                return self._runs[self._by_request[request_id]].record(history=False)
            if state["run_id"] in self._runs:
                raise KeyInUse(f"run {state['run_id']} exists already")
            now = self.now()
            run = Run(run_id=state["run_id"], goal=goal, requester=requester, origin=canonical_json(origin),
                      model=model, status=state["status"], state=without_history(state), version=1,
                      created_at=now, updated_at=now, added=next(self._added), request_id=request_id,
                      lease_owner=lease_to, lease_expires_at=now + lease if lease_to and lease else None)
            run.history.update(history_rows(0, state["history"]))
            run.append([{"type": "run_created", "goal": goal, "requester": requester, "origin": origin,
                         "model": model}], now)
            self._link(run)
            self._runs[run.run_id] = run
            if request_id is not None:
                self._by_request[request_id] = run.run_id
            return run.record(history=True)

    def _link(self, run: Run) -> None:
        """Add the run's creation, or a seal of its events so far, to the chain of runs, as `rows.link_run` does."""
        link, self._audit_head = next_link(self._audit_head, run.run_id, run.events[-1].seq, run.events[-1].hash)
        if isinstance(link, Seal):
            self._seals.append(link)
        else:
            run.link = link

    def append_event(self, run_id: str, event: dict[str, Any]) -> None:
        with self._lock:
            self._run(run_id).append([event], self.now())

    def update_origin(self, run_id: str, origin: dict[str, Any]) -> None:
        with self._lock:
            if run_id in self._runs:
                self._runs[run_id].origin = canonical_json(origin)

    # -- leases --------------------------------------------------------------------------

    def claim(self, run_id: str, owner: str, lease: timedelta) -> RunRecord | None:
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None or not claimable(run.status, run.command) or not (run.free(now) or run.lease_owner == owner):
                return None
            run.lease_owner, run.lease_expires_at = owner, now + lease
            try:
                return run.record(history=True)
            except IncompatibleState:
                self.release(run_id, owner)  # don't keep an unreadable run from other workers
                raise

    def hold(self, run_id: str, owner: str, lease: timedelta) -> bool:
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None or not run.free(now):
                return False
            run.lease_owner, run.lease_expires_at = owner, now + lease
            return True

    def renew(self, run_id: str, owner: str, lease: timedelta) -> bool:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.lease_owner != owner:
                return False
            run.lease_expires_at = self.now() + lease
            return True

    def release(self, run_id: str, owner: str, *, shown_status: str | None = None) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.lease_owner != owner:
                return
            run.lease_owner = run.lease_expires_at = None
            if shown_status is not None:
                run.shown_status = shown_status

    # -- steps and requests ----------------------------------------------------------------

    def save_step(self, run_id: str, *, owner: str, version: int, checkpoint: Checkpoint, write: StepWrite,
                  lease: timedelta, clear_command: bool = False, release: bool = False) -> Saved:
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None or run.version != version or run.lease_owner != owner:
                raise Conflict(f"run {run_id} changed since version {version}; step not saved")
            self._check_step(run, checkpoint, write)
            state = checkpoint.state
            # Everything that can fail (encoding included) comes before the first change: a step
            # refused writes nothing, as a rolled-back transaction.
            state_text = without_history(state)
            history = history_rows(checkpoint.history_start, checkpoint.new_history)
            events = run.numbered(checkpoint.events, now)
            freeze(checkpoint.execution)
            unsealed = len(run.events)
            run.state, run.status = state_text, state["status"]
            run.pending_key = (state.get("pending") or {}).get("key")
            run.version, run.updated_at, run.lease_expires_at = version + 1, now, now + lease
            released = release and (clear_command or run.command is None)
            if released:
                run.lease_owner = run.lease_expires_at = None
            waiting = None if clear_command else thaw(run.command)
            if clear_command:
                run.command = None
            run.history.update(history)
            run.events.extend(events)
            if checkpoint.execution is not None:
                self._finish(checkpoint.execution, now)
            opened, closed = self._apply(run, write, now)
            if waiting is not None and write.refuse_waiting_command is not None:
                run.command = None
                run.append([{"type": "command_refused", **waiting, "reason": write.refuse_waiting_command}], now)
                waiting = None
            if len(run.events) > unsealed and run.status in SEALED_WHEN:
                self._link(run)
            return Saved(version + 1, opened, waiting, closed, released)

    def _apply(self, run: Run, write: StepWrite, now: datetime) -> tuple[tuple[ApprovalRecord, ...],
                                                                          list[ApprovalRecord]]:
        """The step's effects on approvals: those it opens, and those it closes (the run's, then the
        superseded), as the SQL store reports them."""
        replaced = [closed for key in write.superseded
                    for closed in self._close(run, self._by_key.get(key, []), "superseded", now)]
        replaced += [closed for key in write.overruled
                     for closed in self._close(run, self._by_key.get(key, []), "cancelled", now)]
        if write.reopen is not None:
            reopening = write.reopen
            replaced += self._save(run, [change for a in self._by_key.get(reopening.key, [])
                                         if (change := reopen(a.out(), reopening)) is not None])
        opened = tuple(self._open(run, request, now) for request in write.approvals)
        cancelled = (self._close(run, self._of_run(run.run_id), "cancelled", now)
                     if write.close_open_approvals else [])
        return opened, cancelled + replaced

    def _check_step(self, run: Run, checkpoint: Checkpoint, write: StepWrite) -> None:
        """What SQL's constraints would refuse: a history position taken, a second approval in force."""
        taken = set(run.history) & set(range(checkpoint.history_start,
                                              checkpoint.history_start + len(checkpoint.new_history)))
        if taken:
            raise KeyInUse(f"run {run.run_id} already has history at {sorted(taken)}")
        for request in write.approvals:
            if any(a.record.status in LIVE
                   and not (request.key in write.superseded and a.record.status in OPEN)
                   for a in self._by_key.get(request.key, [])):
                raise KeyInUse(f"an approval for {request.key} is in force already")

    def _open(self, run: Run, request: ApprovalRequest, now: datetime) -> ApprovalRecord:
        record = opened(request, approval_id=new_approval_id(), run_id=run.run_id, requester=run.requester, now=now)
        approval = Approval(_copied(record), next(self._added))
        self._approvals[record.approval_id] = approval
        self._by_key.setdefault(record.key, []).append(approval)
        return approval.out()

    def _close(self, run: Run, chosen: Iterable[Approval], status: ApprovalStatus,
               now: datetime) -> list[ApprovalRecord]:
        """Close the open approvals among `chosen` as `status`."""
        return self._save(run, [change for a in list(chosen) if (change := close(a.out(), status, now)) is not None])

    def _save(self, run: Run | None, changes: Iterable[Change]) -> list[ApprovalRecord]:
        """Keep `changes` whole, as `approval_rows.save_changes` writes them: each approval as it is
        now, the grant it made, and its events on its run (`run`, or the approval's own)."""
        now = self.now()
        saved = []
        for change in changes:
            self._approvals[change.after.approval_id].record = _copied(change.after)
            if change.grant is not None:
                self._grants[change.grant.grant_id] = _copied(change.grant)
            (run or self._run(change.after.run_id)).append(list(change.events), now)
            saved.append(self._approvals[change.after.approval_id].out())
        return saved

    def _of_run(self, run_id: str) -> list[Approval]:
        return [a for a in self._approvals.values() if a.record.run_id == run_id]

    def set_command(self, run_id: str, command: dict[str, Any], rule: CommandRule,
                    audited: dict[str, Any] | None = None) -> CommandRefusal | None:
        shown = command.get("shown_version")
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return command_refusal(None, None, None, shown)
            if run.status not in rule.accepts or run.command is not None or shown not in (None, run.version):
                return command_refusal(run.status, thaw(run.command), run.version, shown)
            now = self.now()
            changes: list[Change] = []
            if rule.supersedes_its_approval:
                edited = self._approvals.get(str(command.get("approval_id")))
                superseded = supersede_by_edit(edited.out() if edited else None, run_id=run_id,
                                               digest=command.get("digest"), by=command.get("by"), now=now)
                if isinstance(superseded, CommandRefusal):
                    return superseded
                changes.append(superseded)
            if rule.closes_pending_approval:
                changes += [change for a in self._of_run(run_id)
                            if (change := cancel_pending(a.out(), now, command.get("by"))) is not None]
            run.command, run.updated_at = canonical_json(command), now
            self._save(run, changes)
            run.append([{"type": "command_recorded", **(audited or command)}], now)
            return None

    def clear_command(self, run_id: str, event: dict[str, Any]) -> None:
        with self._lock:
            run = self._run(run_id)
            run.command = None
            run.append([event], self.now())

    # -- recovery ------------------------------------------------------------------------

    def mark_run_shown(self, run_id: str, status: str) -> None:
        with self._lock:
            if run_id in self._runs:
                self._runs[run_id].shown_status = status

    # -- the execution ledger --------------------------------------------------------------

    def begin_execution(self, run_id: str, tool: str, args: dict[str, Any], key: str, *, owner: str,
                        lease: timedelta, dispatch_window: timedelta,
                        restart: Restart | None = None, allowed_by: str | None = None,
                        granted_by: str | None = None, preview: str | None = None) -> ExecutionStart:
        digest = call_digest(tool, args, key, preview)
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None or run.lease_owner != owner or run.lease_expires_at is None or run.lease_expires_at <= now:
                raise Conflict(f"run {run_id}: this worker no longer holds its lease; {key} was not started")
            run.lease_expires_at = now + lease
            existing = self._executions.get(key)
            if existing is not None:
                return self._restart(run, tool, existing, restart, now)
            if granted_by is not None:
                grant = use_grant(self._grants.get(granted_by), granted_by, run_id=run_id, requester=run.requester,
                                  tool=tool, args=args, now=now)
                if isinstance(grant, Ungranted):
                    return grant
                self._grants[granted_by] = grant
                return self._started(run, key, tool, digest, now, granted_by=granted_by, grant_use=grant.uses)
            if allowed_by is not None:  # the policy let it run without a person: no approval to consume
                return self._started(run, key, tool, digest, now, allowed_by=allowed_by)
            latest = newest_first([a for a in self._by_key.get(key, []) if a.record.status != "superseded"],
                                   "requested_at")
            used = dispatch(latest[0].out() if latest else None, run_id=run_id, key=key, digest=digest, now=now,
                            window=dispatch_window)
            if isinstance(used, tuple):
                refusal, expired = used
                self._save(run, [expired] if expired is not None else [])
                return refusal
            self._save(run, [used])
            return self._started(run, key, tool, digest, now, approval_id=used.after.approval_id)

    def _started(self, run: Run, key: str, tool: str, digest: str, now: datetime, **why: str | int) -> Fresh:
        """The ledger row of a call starting now, its first attempt, with the event saying what let it."""
        self._executions[key] = Execution(key=key, run_id=run.run_id, tool=tool, digest=digest, status="started",
                                          attempts=1, started_at=now, added=next(self._added))
        run.append([execution_started(key, tool, **why)], now)
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
            run.command = run.shown_status = None
        existing.attempts += 1
        existing.started_at, existing.finished_at = now, None
        run.append([{"type": "execution_retried", "key": existing.key, "tool": tool,
                     "attempt": existing.attempts, "because": restart, "by": by}], now)
        return Fresh(existing.attempts, version)

    def complete_execution(self, execution: dict[str, Any]) -> None:
        with self._lock:
            self._finish(execution, self.now())

    def _finish(self, execution: dict[str, Any], now: datetime) -> None:
        row = self._executions.get(execution["key"])
        if row is not None:
            row.finish(execution, now)

    # -- approvals -----------------------------------------------------------------------

    def decide(self, approval_id: str, *, approved: bool, user: str, note: str = "",
               digest: str | None = None, grant: bool = False, lease_to: str | None = None,
               lease: timedelta | None = None) -> Voted:
        with self._lock:
            now = self.now()
            approval = self._approvals.get(approval_id)
            if approval is None:
                return Missing("approval")
            run = self._run(approval.record.run_id)
            voted, change = vote(approval.out(), user=user, approved=approved, now=now, note=note, digest=digest,
                                 grant_id=new_grant_id() if grant else None)
            if change is not None:
                self._save(run, [change])
            if isinstance(voted, Decided) and lease_to is not None and lease is not None and (
                    claimable(run.status, run.command) and run.free(now)):
                run.lease_owner, run.lease_expires_at = lease_to, now + lease
                return dataclasses.replace(voted, lease=lease_to)
            return voted

    def nudge_due(self, limit: int = 100) -> list[Nudged]:
        with self._lock:
            now = self.now()
            due = sorted((a for a in self._approvals.values() if a.record.nudge_at is not None),
                         key=lambda a: a.record.nudge_at or now)  # `nudge` says which are due
            made = [nudged for a in due if (nudged := nudge(a.out(), now)) is not None][:limit]
            self._save(None, [change for _, change in made])
            return [nudged for nudged, _ in made]

    def revoke_grant(self, grant_id: str, user: str) -> GrantRecord | None:
        with self._lock:
            grant = self._grants.get(grant_id)
            if grant is None or grant.revoked_at is not None:
                return grant
            now = self.now()
            revoked = self._grants[grant_id] = dataclasses.replace(grant, revoked_at=now, revoked_by=user)
            self._run(grant.run_id).append([{"type": "grant_revoked", "grant_id": grant_id, "by": user}], now)
            return revoked

    def expire_due(self) -> list[ApprovalRecord]:
        with self._lock:
            now = self.now()
            return self._save(None, [expire(a.out(), now) for a in self._approvals.values() if overdue(a.record, now)])

    def set_approval_message(self, approval_id: str, message: dict[str, Any]) -> ApprovalRecord | None:
        with self._lock:
            approval = self._approvals.get(approval_id)
            if approval is None:
                return None
            return approval.change(message=thaw(freeze(message)), shown_status="pending")

    def mark_approval_shown(self, approval_id: str, status: str) -> None:
        with self._lock:
            if approval_id in self._approvals:
                self._approvals[approval_id].change(shown_status=status)


if TYPE_CHECKING:
    from signoff.runtime.ports import Store

    def _keeps_the_contract(store: MemoryStore) -> Store:
        return store  # mypy checks every method against the Protocol


def _copied(value: _Kept) -> _Kept:
    """`value` with its JSON fields copied through canonical JSON, so nothing the caller holds is
    shared with what the store keeps (as a row read back from a database is a fresh value)."""
    copies = {name: thaw(canonical_json(getattr(value, name))) for name in ("args", "asked", "message", "same")
              if hasattr(value, name) and getattr(value, name) is not None}
    return dataclasses.replace(value, **copies)
