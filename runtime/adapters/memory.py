"""The store in one process's memory: the contract of `ports.Store`, as the SQL store keeps it.

For tests, demos and programs that embed the runner without a database; nothing outlives the
process, and only its threads share it. One lock makes every method atomic and isolated, as a
SQL transaction is; each write checks everything first, so a refused write changes nothing.
Times come from `clock` (the wall clock by default), one clock for every lease and expiry.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

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
from signoff.runtime.audit import SEALED_WHEN, Seal
from signoff.runtime.errors import Conflict, IncompatibleState
from signoff.runtime.grants import grant_refusal, granted_values
from signoff.runtime.records import (
    AlreadyCounted,
    AlreadyDecided,
    ApprovalRecord,
    CommandRefusal,
    Counted,
    Decided,
    ExecutionStart,
    Existing,
    Expired,
    Fresh,
    GrantRecord,
    Missing,
    Nudged,
    Restart,
    RunRecord,
    Saved,
    Ungranted,
    Vote,
    Voted,
)
from signoff.runtime.rules import (
    LIVE_APPROVAL,
    OPEN_APPROVAL,
    ApprovalRequest,
    CommandRule,
    StepWrite,
    claimable,
    command_refusal,
    dispatch_refusal,
    first_nudge,
    is_retry_request,
    makes_first_reminder,
    nudged,
)
from signoff.runtime.state import call_digest, canonical_json

__all__ = ["KeyInUse", "MemoryStore"]


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
                    for closed in self._close(self._by_key.get(key, []), "superseded", now)]
        replaced += [closed for key in write.overruled
                     for closed in self._close(self._by_key.get(key, []), "cancelled", now)]
        if write.reopen is not None:
            reopening = write.reopen
            replaced += [a.change(status="pending", quorum=reopening.quorum, asked=thaw(canonical_json(reopening.asked)),
                                  decided_at=None, decided_by=None)
                         for a in self._by_key.get(reopening.key, []) if a.record.status == "approved"]
        opened = tuple(self._open(run, request, now) for request in write.approvals)
        cancelled = self._close(self._of_run(run.run_id), "cancelled", now) if write.close_open_approvals else []
        return opened, cancelled + replaced

    def _check_step(self, run: Run, checkpoint: Checkpoint, write: StepWrite) -> None:
        """What SQL's constraints would refuse: a history position taken, a second approval in force."""
        taken = set(run.history) & set(range(checkpoint.history_start,
                                              checkpoint.history_start + len(checkpoint.new_history)))
        if taken:
            raise KeyInUse(f"run {run.run_id} already has history at {sorted(taken)}")
        for request in write.approvals:
            if any(a.record.status in LIVE_APPROVAL
                   and not (request.key in write.superseded and a.record.status in OPEN_APPROVAL)
                   for a in self._by_key.get(request.key, [])):
                raise KeyInUse(f"an approval for {request.key} is in force already")

    def _open(self, run: Run, request: ApprovalRequest, now: datetime) -> ApprovalRecord:
        record = ApprovalRecord(
            approval_id="apr_" + secrets.token_urlsafe(12), run_id=run.run_id, step=request.step, tool=request.tool,
            args=thaw(canonical_json(request.args)), key=request.key, digest=request.digest,
            status="pending", requester=run.requester, requested_at=now, expires_at=now + request.ttl,
            contract=request.contract, quorum=request.quorum,
            asked=thaw(canonical_json(request.asked)) if request.asked is not None else None,
            nudge_at=first_nudge(request.asked, now, now + request.ttl))
        approval = Approval(record, next(self._added))
        self._approvals[record.approval_id] = approval
        self._by_key.setdefault(record.key, []).append(approval)
        return approval.out()

    def _close(self, chosen: Iterable[Approval], status: str, now: datetime) -> list[ApprovalRecord]:
        """Close the open approvals among `chosen` as `status`."""
        return [a.change(status=status, decided_at=now) for a in list(chosen) if a.record.status in OPEN_APPROVAL]

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
            edited = self._approvals.get(command.get("approval_id") or "") if rule.supersedes_its_approval else None
            if rule.supersedes_its_approval:
                if (edited is None or edited.record.run_id != run_id or edited.record.status != "pending"
                        or edited.record.digest != command.get("digest")):
                    return CommandRefusal("the request was decided before your change arrived", stale=True)
                edited.change(status="superseded", decided_at=now, decided_by=command.get("by"))
            run.command, run.updated_at = canonical_json(command), now
            if rule.closes_pending_approval:
                for approval in self._of_run(run_id):
                    if approval.record.status == "pending":
                        approval.change(status="cancelled", decided_at=now, decided_by=command.get("by"))
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
                grant = self._grants.get(granted_by)
                ungranted = (f"grant {granted_by} does not exist" if grant is None else
                             grant_refusal(grant, run_id=run_id, requester=run.requester, tool=tool, rule=grant.rule,
                                           args=args, now=now))
                if ungranted is not None or grant is None:
                    return Ungranted(ungranted or "")
                self._grants[granted_by] = dataclasses.replace(grant, uses=grant.uses + 1)
                self._executions[key] = Execution(key=key, run_id=run_id, tool=tool, digest=digest, status="started",
                                                  attempts=1, started_at=now, added=next(self._added))
                run.append([{"type": "execution_started", "key": key, "tool": tool, "granted_by": granted_by,
                             "grant_use": grant.uses + 1}], now)
                return Fresh(1)
            if allowed_by is not None:  # the policy let it run without a person: no approval to consume
                self._executions[key] = Execution(key=key, run_id=run_id, tool=tool, digest=digest, status="started",
                                                  attempts=1, started_at=now, added=next(self._added))
                run.append([{"type": "execution_started", "key": key, "tool": tool, "allowed_by": allowed_by}], now)
                return Fresh(1)
            latest = newest_first([a for a in self._by_key.get(key, []) if a.record.status != "superseded"],
                                   "requested_at")
            approval = latest[0] if latest else None
            refusal = dispatch_refusal(approval.record if approval else None, run_id=run_id, key=key, digest=digest,
                                       now=now, window=dispatch_window)
            if refusal is not None:
                if refusal.status == "expired" and approval is not None:
                    self._expire_unused(run, approval, now)
                return refusal
            assert approval is not None  # dispatch_refusal refuses a call with no approval
            approval.change(status="consumed", consumed_at=now)
            self._executions[key] = Execution(key=key, run_id=run_id, tool=tool, digest=digest, status="started",
                                              attempts=1, started_at=now, added=next(self._added))
            run.append([{"type": "execution_started", "key": key, "tool": tool,
                         "approval_id": approval.record.approval_id}], now)
            return Fresh(1)

    def _expire_unused(self, run: Run, approval: Approval, now: datetime) -> None:
        """An approval whose call could not start within the dispatch window expires, audited."""
        approval.change(status="expired")
        run.append([{"type": "approval_expired", "approval_id": approval.record.approval_id,
                     "key": approval.record.key, "approved_by": approval.record.decided_by,
                     "reason": "not started in time after the approval"}], now)

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
            record, run = approval.record, self._run(approval.record.run_id)
            if record.status == "pending" and record.expires_at > now and digest in (None, record.digest):
                voted = self._vote(approval, run, approved=approved, user=user, note=note, now=now, grant=grant)
                if isinstance(voted, Decided) and lease_to is not None and lease is not None and (
                        claimable(run.status, run.command) and run.free(now)):
                    run.lease_owner, run.lease_expires_at = lease_to, now + lease
                    return dataclasses.replace(voted, lease=lease_to)
                return voted
            just_expired = record.status == "pending" and record.expires_at <= now
            if just_expired:
                approval.change(status="expired", decided_at=now)
                run.append([{"type": "approval_expired", "approval_id": approval_id, "key": record.key,
                             "noticed_by": user}], now)
            seen = approval.out()
            return Expired(seen, just_expired) if seen.status == "expired" else AlreadyDecided(seen)

    def _vote(self, approval: Approval, run: Run, *, approved: bool, user: str, note: str,
              now: datetime, grant: bool = False) -> Decided | Counted | AlreadyCounted:
        record = approval.record
        if any(vote.user == user for vote in record.votes):
            return AlreadyCounted(approval.out())
        votes = (*record.votes, Vote(user=user, approved=approved, at=now, note=note or None))
        approvals_given = sum(vote.approved for vote in votes)
        counted = {"approval_id": record.approval_id, "key": record.key, "approved": approved, "by": user,
                   "note": note, "approvals": approvals_given, "quorum": record.quorum}
        if approved and approvals_given < record.quorum:
            run.append([{"type": "approval_vote_recorded", **counted}], now)
            return Counted(approval.change(votes=votes, shown_status=None))
        decided = approval.change(status="approved" if approved else "denied", decided_by=user, decided_at=now,
                                  note=note or None, votes=votes)
        run.append([{"type": "approval_recorded", **counted}], now)
        made = None
        if approved and grant and (record.asked or {}).get("grant"):
            asked = record.asked or {}
            made = GrantRecord(
                grant_id="grt_" + secrets.token_urlsafe(12), approval_id=record.approval_id, run_id=record.run_id,
                requester=record.requester, tool=record.tool, rule=asked.get("rule"),
                same=thaw(canonical_json(granted_values(asked, record.args))), scope=asked["grant"]["scope"],
                created_by=user, created_at=now, expires_at=now + timedelta(seconds=asked["grant"]["for_seconds"]))
            self._grants[made.grant_id] = made
            run.append([{"type": "grant_created", "grant_id": made.grant_id, "approval_id": record.approval_id,
                         "by": user, "tool": made.tool, "rule": made.rule, "scope": made.scope,
                         "expires_at": made.expires_at.isoformat()}], now)
        return Decided(decided, made)

    def nudge_due(self, limit: int = 100) -> list[Nudged]:
        with self._lock:
            now = self.now()
            due = sorted((a for a in self._approvals.values() if a.record.status == "pending"
                          and a.record.nudge_at is not None and a.record.nudge_at <= now
                          and a.record.expires_at > now), key=lambda a: a.record.nudge_at or now)[:limit]
            made = []
            for approval in due:
                record = approval.record
                kinds, done, next_at, asked = nudged(record, record.nudges, now)
                changed = approval.change(nudges=done, nudge_at=next_at,
                                          **({"asked": asked} if asked is not None else {}))
                added = tuple(i for i in (asked or {}).get("approvers", [])
                              if i not in (record.asked or {}).get("approvers", []))
                self._run(record.run_id).append([
                    {"type": "approval_escalated" if kind == "escalate" else "approval_reminded",
                     "approval_id": record.approval_id, "key": record.key,
                     **({"added": list(added)} if kind == "escalate" else {})} for kind in kinds], now)
                made.append(Nudged(changed, tuple(kinds), added, makes_first_reminder(record, record.nudges, done)))
            return made

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
            due = [a for a in self._approvals.values() if a.record.status == "pending" and a.record.expires_at <= now]
            for approval in due:
                approval.change(status="expired", decided_at=now)
                self._run(approval.record.run_id).append(
                    [{"type": "approval_expired", "approval_id": approval.record.approval_id,
                      "key": approval.record.key}], now)
            return [a.out() for a in due]

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
