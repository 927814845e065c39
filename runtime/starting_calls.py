"""A call starting through the execution ledger, written once for every store: `begin_execution`
uses the call's approval or grant up, or lets the policy's rule start it, and writes its ledger row,
in one unit of work a store opens (`approval_unit.ApprovalUnit`), behind the run's lease."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from signoff.runtime.approval import dispatch, use_grant
from signoff.runtime.approval_unit import ApprovalUnit, ApprovalUnits, HeldRun, LedgerRow
from signoff.runtime.errors import Conflict
from signoff.runtime.events import execution_retried
from signoff.runtime.notices import retried_call_notices
from signoff.runtime.receipts import SigningKey, Unasked, start_receipt
from signoff.runtime.records import ExecutionStart, Existing, Fresh, Restart, Ungranted
from signoff.runtime.rules import execution_started, is_retry_request
from signoff.runtime.state import call_digest


@dataclass(frozen=True)
class StartingCall:
    """One call starting `now` in run `run_id` (asked for by `requester`), under its key."""

    run_id: str
    requester: str
    tool: str
    args: dict[str, Any]
    key: str
    digest: str
    """Of the call and the preview it was approved with (`state.call_digest`)."""
    now: datetime
    preview: str | None
    policy: str | None
    signer: SigningKey | None

    def receipt(self, decision: Unasked, rule: str | None, grant_id: str | None = None) -> dict[str, Any] | None:
        """The signed receipt of the call starting unasked, as `rule` (or the grant `grant_id`)
        let it; None when no key signs receipts."""
        if self.signer is None:
            return None
        return start_receipt(decision, self.signer, run_id=self.run_id, requester=self.requester, tool=self.tool,
                             args=self.args, call_key=self.key, digest=self.digest, now=self.now, rule=rule,
                             grant_id=grant_id, preview=self.preview, policy=self.policy)


def begin_execution(store: ApprovalUnits, run_id: str, tool: str, args: dict[str, Any], key: str, *, owner: str,
                    lease: timedelta, dispatch_window: timedelta, restart: Restart | None = None,
                    allowed_by: str | None = None, granted_by: str | None = None, preview: str | None = None,
                    signer: SigningKey | None = None, policy: str | None = None) -> ExecutionStart:
    """Use the call's approval up and write its ledger row "started", atomically, or say why not.

    Fenced on the lease: only `owner` holding a live lease may start the run's call (renewed here,
    so the call starts with a whole lease ahead of it); anyone else gets `Conflict`, nothing changed.
    The approval must be the call's, approved, within `dispatch_window` (`approval.dispatch`; one
    approved too long ago is marked expired). `allowed_by`: the policy's rule let the call run
    unasked; no approval is used up. `granted_by`: the grant that lets it run unasked, checked now
    and its use counted (`approval.use_grant`), or `Ungranted` and nothing written, so a revoked
    grant stops the very next call. `preview`: the digest of the preview it was approved with, part
    of what the approval is bound to. `signer`: a call `allowed_by` or `granted_by` starts with its
    signed receipt (`receipts.start_receipt`; an approved call's was kept with its decision).

    A key already in the ledger is `Existing`: a recorded outcome never runs again, whoever asks,
    and a start with no outcome is restarted (`Fresh`, the next attempt) only when `restart` says
    why: `idempotent`, or `requested` by a waiting Retry, used up (the run's version moved on) here.
    """
    with store.approval_unit() as unit:
        held = unit.renew_lease(run_id, owner, lease)
        if held is None:
            raise Conflict(f"run {run_id}: this worker no longer holds its lease; {key} was not started")
        existing = unit.execution(key)
        if existing is not None:
            return _restart(unit, run_id, tool, existing, held, restart)
        call = StartingCall(run_id, held.requester, tool, args, key, call_digest(tool, args, key, preview), unit.now,
                            preview, policy, signer)
        if granted_by is not None:
            return _start_granted(unit, call, granted_by)
        if allowed_by is not None:
            return _started(unit, call, call.receipt("allowed", allowed_by), allowed_by=allowed_by)
        return _start_approved(unit, call, dispatch_window)


def _start_granted(unit: ApprovalUnit, call: StartingCall, granted_by: str) -> ExecutionStart:
    """Start a call under the grant `granted_by`, if it still covers it, its use counted."""
    grant = use_grant(unit.grant(granted_by), granted_by, run_id=call.run_id, requester=call.requester,
                      tool=call.tool, args=call.args, now=call.now)
    if isinstance(grant, Ungranted):
        return grant
    unit.save_grant_use(grant)
    return _started(unit, call, call.receipt("granted", grant.rule, grant_id=granted_by),
                    granted_by=granted_by, grant_use=grant.uses)


def _start_approved(unit: ApprovalUnit, call: StartingCall, window: timedelta) -> ExecutionStart:
    """Start a call a person approved within `window`, using its approval up; or say why not."""
    used = dispatch(unit.latest_approval(call.key), run_id=call.run_id, key=call.key, digest=call.digest,
                    now=call.now, window=window)
    if isinstance(used, tuple):
        refusal, expired = used
        unit.save([expired] if expired is not None else [])
        return refusal
    unit.save([used])
    return _started(unit, call, None, approval_id=used.after.approval_id)


def _started(unit: ApprovalUnit, call: StartingCall, receipt: dict[str, Any] | None, **why: str | int) -> Fresh:
    """The ledger row of a call starting now, its first attempt, with its receipt (if signed) and
    the event saying what let it."""
    if receipt is not None:
        unit.keep_receipt(receipt)
    unit.start_execution(call.run_id, call.key, call.tool, call.digest)
    unit.append(call.run_id, [execution_started(call.key, call.tool, **why)])
    return Fresh(1)


def _restart(unit: ApprovalUnit, run_id: str, tool: str, existing: LedgerRow, held: HeldRun,
             restart: Restart | None) -> ExecutionStart:
    """The ledger already has the key: its outcome, or a restart `restart` allows."""
    if existing.status != "started" or restart is None:
        return Existing(existing.status, existing.result, existing.error)
    version = by = None
    if restart == "requested":
        request = held.command
        if request is None or not is_retry_request(request):
            return Existing(existing.status, None, None)  # the request was used up already: ask again
        version, by = held.version + 1, request.get("by")
        unit.use_up_command(run_id, version)
        unit.owe(run_id, retried_call_notices(held.status))
    attempt = existing.attempts + 1
    unit.restart_execution(existing.key, attempt)
    unit.append(run_id, [execution_retried(existing.key, tool, attempt, restart, by)])
    return Fresh(attempt, version)
