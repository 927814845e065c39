"""The SQL store's writes of approvals, grants and the execution ledger, each one transaction.

An approval is loaded with its votes, handed to a transition of `runtime/approval.py`, and the
`Change` saved whole (`approval_rows.save_changes`); a call starts only through `begin_execution`,
fenced on the run's lease, in the transaction that uses its approval or its grant up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, or_, select, update
from sqlalchemy.engine import Row

from signoff.runtime.adapters.approval_rows import (
    approvals_where,
    grant_row,
    insert_receipt,
    save_changes,
    save_grant_use,
    with_all_votes,
)
from signoff.runtime.adapters.db import WRITE_OPTION
from signoff.runtime.adapters.notice_rows import owe
from signoff.runtime.adapters.reads import SqlReads
from signoff.runtime.adapters.rows import (
    append_events,
    approval_record,
    finish_execution,
    grant_record,
    json_or,
    loads,
)
from signoff.runtime.adapters.sql_approval_unit import SqlApprovalUnit
from signoff.runtime.adapters.starting_calls import StartingCall
from signoff.runtime.adapters.statements import (
    EXECUTION_BY_KEY,
    FENCE,
    INSERT_EXECUTION,
    lease_params,
)
from signoff.runtime.adapters.tables import approvals, grants, runs, tool_executions
from signoff.runtime.approval import (
    dispatch,
    use_grant,
)
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
    execution_started,
    is_retry_request,
)
from signoff.runtime.state import call_digest, canonical_json


class SqlTransactions(SqlReads):
    """The reads, and the one way to write: a transaction at a time."""

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One write transaction (on SQLite it takes the write lock at BEGIN)."""
        with self.engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                yield conn


class SqlApprovals(SqlTransactions):
    """Approvals, grants and the execution ledger: their writes."""

    # -- the execution ledger ------------------------------------------------------------

    def begin_execution(self, run_id: str, tool: str, args: dict[str, Any], key: str, *, owner: str,
                        lease: timedelta, dispatch_window: timedelta, restart: Restart | None = None,
                        allowed_by: str | None = None, granted_by: str | None = None,
                        preview: str | None = None, signer: SigningKey | None = None,
                        policy: str | None = None) -> ExecutionStart:
        """Consume the call's approval and write the ledger row, or say why the call must not run.

        Fenced on the lease: only the worker holding a live lease on the run may start its call (it
        is renewed here, so the call starts with a whole lease ahead of it); any other gets
        `Conflict`. A ledger row that already has an outcome is never run again, whoever asks. One
        that started and left none is restarted only when `restart` says why: the tool dedupes on
        its key (`idempotent`), or a person asked to retry it (`requested`) — that request is used
        up in this same transaction, so a crash during the retried call cannot lead to another.
        """
        with self._tx() as conn:
            now = self._now(conn)
            held = conn.execute(FENCE, lease_params(run_id, owner, now, lease)).first()
            if held is None:
                raise Conflict(f"run {run_id}: this worker no longer holds its lease; {key} was not started")
            existing = conn.execute(EXECUTION_BY_KEY, {"b_key": key}).first()
            if existing is not None:
                return self._restart(conn, run_id, tool, existing, held, restart, now)
            call = StartingCall(run_id, held.requester, tool, args, key, call_digest(tool, args, key, preview), now,
                                preview, policy, signer)
            if granted_by is not None:
                return _start_granted(conn, call, granted_by)
            if allowed_by is not None:  # the policy let it run without a person: no approval to consume
                return _start_allowed(conn, call, allowed_by)
            return _start_approved(conn, call, dispatch_window)

    def _restart(self, conn: Connection, run_id: str, tool: str, existing: Row[Any], held: Row[Any],
                 restart: Restart | None, now: datetime) -> ExecutionStart:
        """The ledger already has the key: its outcome, or a restart `restart` allows."""
        if existing.status != "started" or restart is None:
            return Existing(existing.status, loads(existing.result), existing.error)
        version = None
        by = None
        if restart == "requested":
            request = json_or(held.command, None)
            if not is_retry_request(request):
                return Existing(existing.status, None, None)  # the request was used up already: ask again
            # Used up with the restart, and the run moves on a version: a replayed or old Retry finds it gone.
            version = held.version + 1
            by = request.get("by")
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(command=None, version=version))
            owe(conn, [(run_id, notice) for notice in retried_call_notices(held.status)], now)
        conn.execute(update(tool_executions).where(tool_executions.c.key == existing.key,
                                                   tool_executions.c.status == "started")
                     .values(attempts=existing.attempts + 1, started_at=now, finished_at=None))
        append_events(conn, run_id, [execution_retried(existing.key, tool, existing.attempts + 1, restart, by)], now)
        return Fresh(existing.attempts + 1, version)

    def complete_execution(self, execution: dict[str, Any]) -> None:
        """Record an outcome outside a step (its step could not be saved)."""
        with self._tx() as conn:
            finish_execution(conn, execution, self._now(conn))

    # -- approvals and break-glass ------------------------------------------------------

    @contextmanager
    def approval_unit(self) -> Iterator[SqlApprovalUnit]:
        """One write transaction over approvals (`approval_commands` runs in it)."""
        with self._tx() as conn:
            yield SqlApprovalUnit(conn, self._now(conn))

    def set_glass_message(self, approval_id: str, message: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(update(approvals).where(approvals.c.approval_id == approval_id)
                         .values(glass_message=canonical_json(message)))

    def unreviewed_glass(self, limit: int = 100) -> list[ApprovalRecord]:
        with self.engine.connect() as conn:
            query = (select(approvals).where(approvals.c.glass.is_not(None), approvals.c.glass_review.is_(None))
                     .order_by(approvals.c.decided_at).limit(limit))
            return with_all_votes(conn, conn.execute(query).all())

    # -- grants ------------------------------------------------------------------------------

    def live_grants(self, run_id: str, requester: str) -> list[GrantRecord]:
        """Grants in force now that could cover a call of this run: its own, and its requester's."""
        with self.engine.connect() as conn:
            now = self._now(conn)
            query = select(grants).where(grants.c.revoked_at.is_(None), grants.c.expires_at > now,
                                         or_(and_(grants.c.scope == "run", grants.c.run_id == run_id),
                                             and_(grants.c.scope == "requester", grants.c.requester == requester)))
            return [grant_record(r) for r in conn.execute(query.order_by(grants.c.created_at)).all()]

    def list_grants(self, *, live: bool = True, limit: int = 50, run_id: str | None = None) -> list[GrantRecord]:
        """Grants, newest first; `live`: only those in force now; `run_id`: only those its approvals made."""
        with self.engine.connect() as conn:
            query = select(grants).order_by(grants.c.created_at.desc()).limit(limit)
            if run_id is not None:
                query = query.where(grants.c.run_id == run_id)
            if live:
                query = query.where(grants.c.revoked_at.is_(None), grants.c.expires_at > self._now(conn))
            return [grant_record(r) for r in conn.execute(query).all()]

    def get_grant(self, grant_id: str) -> GrantRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(grants).where(grants.c.grant_id == grant_id)).first()
        return grant_record(row) if row is not None else None

    def revoke_grant(self, grant_id: str, user: str) -> GrantRecord | None:
        """End a grant now, with a `grant_revoked` event; None if there is no such grant. A call it
        covered that has not started yet is asked about instead (`begin_execution` checks it)."""
        with self._tx() as conn:
            now = self._now(conn)
            row = conn.execute(update(grants).where(grants.c.grant_id == grant_id, grants.c.revoked_at.is_(None))
                               .values(revoked_at=now, revoked_by=user).returning(*grants.c)).first()
            if row is not None:
                append_events(conn, row.run_id, [grant_revoked(grant_id, user)], now)
            else:
                row = conn.execute(select(grants).where(grants.c.grant_id == grant_id)).first()
        return grant_record(row) if row is not None else None

    def set_approval_message(self, approval_id: str, message: dict[str, Any]) -> ApprovalRecord | None:
        """Record where the request was posted; returns the approval as it is now."""
        with self._tx() as conn:
            conn.execute(update(approvals).where(approvals.c.approval_id == approval_id)
                         .values(message=canonical_json(message)))
            row = conn.execute(select(approvals).where(approvals.c.approval_id == approval_id)).first()
        return approval_record(row) if row else None


def _start_granted(conn: Connection, call: StartingCall, granted_by: str) -> ExecutionStart:
    """Start a call under the grant `granted_by`, if it still covers it: its use counted, its receipt kept."""
    grant = use_grant(grant_row(conn, granted_by), granted_by, run_id=call.run_id, requester=call.requester,
                      tool=call.tool, args=call.args, now=call.now)
    if isinstance(grant, Ungranted):
        return grant
    save_grant_use(conn, grant)
    _keep_receipt(conn, call, call.receipt("granted", grant.rule, grant_id=granted_by))
    return _started(conn, call, granted_by=granted_by, grant_use=grant.uses)


def _start_allowed(conn: Connection, call: StartingCall, allowed_by: str) -> Fresh:
    """Start a call the policy's rule `allowed_by` lets run unasked, with its receipt."""
    _keep_receipt(conn, call, call.receipt("allowed", allowed_by))
    return _started(conn, call, allowed_by=allowed_by)


def _start_approved(conn: Connection, call: StartingCall, window: timedelta) -> ExecutionStart:
    """Start a call a person approved within `window`, using its approval up; or say why not (an
    approval approved too long ago is marked expired)."""
    found = approvals_where(conn, approvals.c.key == call.key, approvals.c.status != "superseded",
                            order=approvals.c.requested_at.desc(), limit=1)
    used = dispatch(found[0] if found else None, run_id=call.run_id, key=call.key, digest=call.digest,
                    now=call.now, window=window)
    if isinstance(used, tuple):
        refusal, expired = used
        save_changes(conn, [expired] if expired is not None else [], call.now)
        return refusal
    save_changes(conn, [used], call.now)
    return _started(conn, call, approval_id=used.after.approval_id)


def _keep_receipt(conn: Connection, call: StartingCall, receipt: dict[str, Any] | None) -> None:
    if receipt is not None:
        insert_receipt(conn, receipt, call.now)


def _started(conn: Connection, call: StartingCall, **why: str | int) -> Fresh:
    """The ledger row of a call starting now, its first attempt, with the event saying what let it."""
    conn.execute(INSERT_EXECUTION, {"key": call.key, "run_id": call.run_id, "tool": call.tool, "digest": call.digest,
                                    "status": "started", "attempts": 1, "started_at": call.now})
    append_events(conn, call.run_id, [execution_started(call.key, call.tool, **why)], call.now)
    return Fresh(1)
