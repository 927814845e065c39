"""The durable store on SQLAlchemy 2.0 (with its reads in `reads.py`, approvals as rows in
`approval_rows.py` and row helpers in `rows.py`).

Every write is one transaction that takes the run's row first, so writers on any replica follow
one another run by run; an approval is loaded, handed to a transition of `runtime/approval.py`,
and the change saved as a compare-and-set (`UPDATE ... WHERE status = ...`), so exactly one of any
number of concurrent deciders wins, on SQLite and on PostgreSQL alike. What a write does beyond
its own rows comes from `runtime/rules.py` as data: the store decides no rule.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Connection, and_, or_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError

from signoff.runtime.adapters.approval_rows import (
    approvals_where,
    grant_row,
    insert_approval,
    save_changes,
    save_grant_use,
)
from signoff.runtime.adapters.db import WRITE_OPTION
from signoff.runtime.adapters.ids import new_approval_id, new_grant_id
from signoff.runtime.adapters.reads import SqlReads
from signoff.runtime.adapters.rows import (
    SAVE_STEP,
    append_events,
    append_history,
    approval_record,
    dump_without_history,
    finish_execution,
    grant_record,
    insert_events,
    insert_run,
    json_or,
    link_run,
    loads,
    lock_runs,
    run_record,
    step_params,
)
from signoff.runtime.adapters.statements import (
    CLAIM,
    EXECUTION_BY_KEY,
    FENCE,
    HOLD,
    INSERT_EXECUTION,
    LOCK_RUN,
    RELEASE,
    RELEASE_TOLD,
    RENEW,
    RUN_OF_APPROVAL,
    TAKE_FREE_LEASE,
)
from signoff.runtime.adapters.tables import approvals, grants, runs, tool_executions
from signoff.runtime.agent import Checkpoint
from signoff.runtime.approval import (
    OPEN,
    ApprovalRequest,
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
from signoff.runtime.audit import SEALED_WHEN
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
    command_refusal,
    execution_started,
    is_retry_request,
)
from signoff.runtime.state import call_digest, canonical_json


class _Undone(Exception):
    """A write found, part way through, that it must not happen: its transaction is rolled back."""

    def __init__(self, refusal: CommandRefusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


class SqlStore(SqlReads):
    """Runs, approvals, events and the execution ledger in one SQL database: the reads of
    `SqlReads`, and the writes, each one transaction."""

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One write transaction (on SQLite it takes the write lock at BEGIN)."""
        with self.engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                yield conn

    # -- runs ----------------------------------------------------------------------------

    def create_run(self, state: dict[str, Any], *, goal: str, requester: str, origin: dict[str, Any],
                   model: str, request_id: str | None = None, lease_to: str | None = None,
                   lease: timedelta | None = None) -> RunRecord:
        """Insert a new run; with a `request_id` already used, return that request's run instead."""
        try:
            with self._tx() as conn:
                now = self._now(conn)
                created = {"type": "run_created", "goal": goal, "requester": requester, "origin": origin,
                           "model": model}
                first, row = insert_run(conn, dict(
                    run_id=state["run_id"], goal=goal, requester=requester, origin=canonical_json(origin),
                    model=model, status=state["status"], state=dump_without_history(state),
                    history_len=0, version=1, created_at=now, updated_at=now, request_id=request_id,
                    lease_owner=lease_to, lease_expires_at=now + lease if lease_to and lease else None,
                ), created, now)
                append_history(conn, state["run_id"], 0, state["history"])
                link_run(conn, state["run_id"], 1, first)
        except IntegrityError:
            earlier = self._run_for_request(request_id)
            if earlier is None:
                raise
            return earlier
        return run_record(row, list(state["history"]))

    def claim(self, run_id: str, owner: str, lease: timedelta) -> RunRecord | None:
        """Take the run's lease if nobody holds a live one; None if somebody does or the run ended."""
        with self._tx() as conn:
            now = self._now(conn)
            claimed = conn.execute(CLAIM, _lease_params(run_id, owner, now, lease)).rowcount
        if claimed != 1:
            return None
        try:
            return self.get_run(run_id)
        except IncompatibleState:
            # Unreadable here (corrupted, or written by a newer Signoff): don't keep it from other workers.
            self.release(run_id, owner)
            raise

    def hold(self, run_id: str, owner: str, lease: timedelta) -> bool:
        """Take the run's lease for a short errand, whatever the run's status (recovery re-posting a
        message); False if someone holds a live lease."""
        with self._tx() as conn:
            return conn.execute(HOLD, _lease_params(run_id, owner, self._now(conn), lease)).rowcount == 1

    def renew(self, run_id: str, owner: str, lease: timedelta) -> bool:
        with self._tx() as conn:
            return conn.execute(RENEW, _lease_params(run_id, owner, self._now(conn), lease)).rowcount == 1

    def release(self, run_id: str, owner: str, *, shown_status: str | None = None) -> None:
        """Let go of the run; `shown_status` records, in the same statement, the ending people were told."""
        with self._tx() as conn:
            if shown_status is None:
                conn.execute(RELEASE, {"b_run_id": run_id, "b_owner": owner})
            else:
                conn.execute(RELEASE_TOLD, {"b_run_id": run_id, "b_owner": owner, "b_shown_status": shown_status})

    def save_step(self, run_id: str, *, owner: str, version: int, checkpoint: Checkpoint, write: StepWrite,
                  lease: timedelta, clear_command: bool = False, release: bool = False) -> Saved:
        """Commit one step: state, new history, its events, the ledger outcome and `write` applied.

        Raises `Conflict` (writing nothing) if the run changed since `version` or the lease was lost.
        """
        state = checkpoint.state
        with self._tx() as conn:
            now = self._now(conn)
            params = step_params(run_id, owner, version, state, len(state["history"]), len(checkpoint.events),
                                 now, lease)
            row = conn.execute(SAVE_STEP[clear_command, release], params).first()
            if row is None:
                raise Conflict(f"run {run_id} changed since version {version}; step not saved")
            append_history(conn, run_id, checkpoint.history_start, checkpoint.new_history)
            last = insert_events(conn, run_id, checkpoint.events, row.event_count - len(checkpoint.events) + 1, now,
                                 row.last_hash)
            if checkpoint.execution is not None:
                finish_execution(conn, checkpoint.execution, now)
            replaced = self._close_replaced(conn, write, now)
            opened = tuple(self._open(conn, run_id, request, row.requester, now) for request in write.approvals)
            command = json.loads(row.command) if row.command and not clear_command else None
            cancelled = (_closed(conn, now, approvals.c.run_id == run_id, status="cancelled")
                         if write.close_open_approvals else [])
            if command is not None and write.refuse_waiting_command is not None:
                conn.execute(update(runs).where(runs.c.run_id == run_id).values(command=None))
                last = append_events(conn, run_id, [{"type": "command_refused", **command,
                                                      "reason": write.refuse_waiting_command}], now)
                command = None
            if last is not None and state["status"] in SEALED_WHEN:  # last: it takes the head row
                link_run(conn, run_id, *last)
        return Saved(version + 1, opened, command, cancelled + replaced, released=row.lease_owner is None)

    @staticmethod
    def _close_replaced(conn: Connection, write: StepWrite, now: datetime) -> list[ApprovalRecord]:
        """Close the approvals `write` says no longer hold, and reopen the one the policy asks more of."""
        replaced = [*(_closed(conn, now, approvals.c.key == key, status="superseded") for key in write.superseded),
                    *(_closed(conn, now, approvals.c.key == key, status="cancelled") for key in write.overruled)]
        closed = [approval for approvals_closed in replaced for approval in approvals_closed]
        if write.reopen is not None:
            changes = [change for approval in approvals_where(conn, approvals.c.key == write.reopen.key)
                       if (change := reopen(approval, write.reopen)) is not None]
            save_changes(conn, changes, now)
            closed += [change.after for change in changes]
        return closed

    @staticmethod
    def _open(conn: Connection, run_id: str, request: ApprovalRequest, requester: str,
              now: datetime) -> ApprovalRecord:
        approval = opened(request, approval_id=new_approval_id(), run_id=run_id, requester=requester, now=now)
        insert_approval(conn, approval)
        return approval

    def set_command(self, run_id: str, command: dict[str, Any], rule: CommandRule,
                    audited: dict[str, Any] | None = None) -> CommandRefusal | None:
        """Leave a command for the run's worker, applying `rule`; returns None, or why it was refused.

        A command with a `shown_version` (pressed on a message showing the run at that version) is
        taken only while the run is still at that version: a replayed click, or one on an old copy
        of the message, finds the run moved on and changes nothing.
        """
        shown = command.get("shown_version")
        conditions = [runs.c.run_id == run_id, runs.c.status.in_(sorted(rule.accepts)), runs.c.command.is_(None)]
        if shown is not None:
            conditions.append(runs.c.version == shown)
        try:
            with self._tx() as conn:
                return self._set_command(conn, run_id, command, rule, conditions, shown, audited or command)
        except _Undone as undone:
            return undone.refusal

    def _set_command(self, conn: Connection, run_id: str, command: dict[str, Any], rule: CommandRule,
                     conditions: list[Any], shown: int | None, audited: dict[str, Any]) -> CommandRefusal | None:
        """`set_command` in `conn`'s transaction; raises `_Undone` to roll it back."""
        now = self._now(conn)
        done = conn.execute(
            update(runs).where(*conditions).values(command=canonical_json(command), updated_at=now)
        ).rowcount
        if done != 1:
            found = conn.execute(select(runs.c.status, runs.c.command, runs.c.version)
                                 .where(runs.c.run_id == run_id)).first()
            if found is None:
                return command_refusal(None, None, None, shown)
            return command_refusal(found.status, json_or(found.command, None), found.version, shown)
        if rule.closes_pending_approval:
            save_changes(conn, [change for approval in approvals_where(conn, approvals.c.run_id == run_id,
                                                                        approvals.c.status == "pending")
                                if (change := cancel_pending(approval, now, command.get("by"))) is not None], now)
        if rule.supersedes_its_approval:
            edited = approvals_where(conn, approvals.c.approval_id == str(command.get("approval_id")))
            superseded = supersede_by_edit(edited[0] if edited else None, run_id=run_id, digest=command.get("digest"),
                                           by=command.get("by"), now=now)
            if isinstance(superseded, CommandRefusal):
                raise _Undone(superseded)  # nothing of this request is kept: the approval was decided first
            save_changes(conn, [superseded], now)
        append_events(conn, run_id, [{"type": "command_recorded", **audited}], now)
        return None

    def clear_command(self, run_id: str, event: dict[str, Any]) -> None:
        """Drop a command that could not be applied, and say why in the audit log."""
        with self._tx() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(command=None))
            append_events(conn, run_id, [event], self._now(conn))

    def update_origin(self, run_id: str, origin: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(origin=canonical_json(origin)))

    def append_event(self, run_id: str, event: dict[str, Any]) -> None:
        with self._tx() as conn:
            append_events(conn, run_id, [event], self._now(conn))

    # -- the execution ledger ------------------------------------------------------------

    def begin_execution(self, run_id: str, tool: str, args: dict[str, Any], key: str, *, owner: str,
                        lease: timedelta, dispatch_window: timedelta, restart: Restart | None = None,
                        allowed_by: str | None = None, granted_by: str | None = None,
                        preview: str | None = None) -> ExecutionStart:
        """Consume the call's approval and write the ledger row, or say why the call must not run.

        Fenced on the lease: only the worker holding a live lease on the run may start its call (it
        is renewed here, so the call starts with a whole lease ahead of it); any other gets
        `Conflict`. A ledger row that already has an outcome is never run again, whoever asks. One
        that started and left none is restarted only when `restart` says why: the tool dedupes on
        its key (`idempotent`), or a person asked to retry it (`requested`) — that request is used
        up in this same transaction, so a crash during the retried call cannot lead to another.
        """
        digest = call_digest(tool, args, key, preview)
        with self._tx() as conn:
            now = self._now(conn)
            held = conn.execute(FENCE, _lease_params(run_id, owner, now, lease)).first()
            if held is None:
                raise Conflict(f"run {run_id}: this worker no longer holds its lease; {key} was not started")
            existing = conn.execute(EXECUTION_BY_KEY, {"b_key": key}).first()
            if existing is not None:
                return self._restart(conn, run_id, tool, existing, held, restart, now)
            if granted_by is not None:
                grant = use_grant(grant_row(conn, granted_by), granted_by, run_id=run_id, requester=held.requester,
                                  tool=tool, args=args, now=now)
                if isinstance(grant, Ungranted):
                    return grant
                save_grant_use(conn, grant)
                return _started(conn, key, run_id, tool, digest, now, granted_by=granted_by, grant_use=grant.uses)
            if allowed_by is not None:  # the policy let it run without a person: no approval to consume
                return _started(conn, key, run_id, tool, digest, now, allowed_by=allowed_by)
            found = approvals_where(conn, approvals.c.key == key, approvals.c.status != "superseded",
                                    order=approvals.c.requested_at.desc(), limit=1)
            used = dispatch(found[0] if found else None, run_id=run_id, key=key, digest=digest, now=now,
                            window=dispatch_window)
            if isinstance(used, tuple):
                refusal, expired = used
                save_changes(conn, [expired] if expired is not None else [], now)
                return refusal
            save_changes(conn, [used], now)
            return _started(conn, key, run_id, tool, digest, now, approval_id=used.after.approval_id)

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
            # Used up with the restart, and the run moves on a version: a replayed or old Retry finds
            # it gone, and the stopped message is told again if this attempt never reports back.
            version = held.version + 1
            by = request.get("by")
            conn.execute(update(runs).where(runs.c.run_id == run_id)
                         .values(command=None, version=version, shown_status=None))
        conn.execute(update(tool_executions).where(tool_executions.c.key == existing.key,
                                                   tool_executions.c.status == "started")
                     .values(attempts=existing.attempts + 1, started_at=now, finished_at=None))
        append_events(conn, run_id, [{"type": "execution_retried", "key": existing.key, "tool": tool,
                                       "attempt": existing.attempts + 1, "because": restart, "by": by}], now)
        return Fresh(existing.attempts + 1, version)

    def complete_execution(self, execution: dict[str, Any]) -> None:
        """Record an outcome outside a step (its step could not be saved)."""
        with self._tx() as conn:
            finish_execution(conn, execution, self._now(conn))

    # -- approvals -----------------------------------------------------------------------

    def decide(self, approval_id: str, *, approved: bool, user: str, note: str = "",
               digest: str | None = None, grant: bool = False, lease_to: str | None = None,
               lease: timedelta | None = None) -> Voted:
        """Count one person's decision (`approval.vote` decides it); the run's row is taken first, so
        deciders on any replica count one after another and exactly one of them completes (or
        vetoes) the approval."""
        with self._tx() as conn:
            now = self._now(conn)
            run_id = conn.execute(RUN_OF_APPROVAL, {"b_approval_id": approval_id}).scalar()
            if run_id is None:
                return Missing("approval")
            # Every writer takes a run's row before its approvals' rows (see `rows.lock_runs`).
            conn.execute(LOCK_RUN, {"b_run_id": run_id})
            [approval] = approvals_where(conn, approvals.c.approval_id == approval_id)
            voted, change = vote(approval, user=user, approved=approved, now=now, note=note, digest=digest,
                                 grant_id=new_grant_id() if grant else None)
            if change is not None:
                save_changes(conn, [change], now)
            if isinstance(voted, Decided) and lease_to is not None and lease is not None and conn.execute(
                    TAKE_FREE_LEASE, _lease_params(run_id, lease_to, now, lease)).rowcount == 1:
                return dataclasses.replace(voted, lease=lease_to)
            return voted

    def nudge_due(self, limit: int = 100) -> list[Nudged]:
        """Every pending approval whose next reminder or escalation is due (`approval.nudge`): each
        is made once, whichever replica's sweep gets there first (the runs' rows are held, and the
        change is a compare-and-set), with its event; an escalation adds its people in the same write."""
        with self._tx() as conn:
            now = self._now(conn)
            due = and_(approvals.c.status == "pending", approvals.c.nudge_at <= now, approvals.c.expires_at > now)
            lock_runs(conn, select(runs.c.run_id).where(runs.c.run_id.in_(select(approvals.c.run_id).where(due))))
            made = [nudged for approval in approvals_where(conn, due, order=approvals.c.nudge_at, limit=limit)
                    if (nudged := nudge(approval, now)) is not None]
            save_changes(conn, [change for _, change in made], now)
        return [nudged for nudged, _ in made]

    # -- grants ------------------------------------------------------------------------------

    def live_grants(self, run_id: str, requester: str) -> list[GrantRecord]:
        """Grants in force now that could cover a call of this run: its own, and its requester's."""
        with self.engine.connect() as conn:
            now = self._now(conn)
            query = select(grants).where(grants.c.revoked_at.is_(None), grants.c.expires_at > now,
                                         or_(and_(grants.c.scope == "run", grants.c.run_id == run_id),
                                             and_(grants.c.scope == "requester", grants.c.requester == requester)))
            return [grant_record(r) for r in conn.execute(query.order_by(grants.c.created_at)).all()]

    def list_grants(self, *, live: bool = True, limit: int = 50) -> list[GrantRecord]:
        """Grants, newest first; `live`: only those in force now."""
        with self.engine.connect() as conn:
            query = select(grants).order_by(grants.c.created_at.desc()).limit(limit)
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
                append_events(conn, row.run_id, [{"type": "grant_revoked", "grant_id": grant_id, "by": user}], now)
            else:
                row = conn.execute(select(grants).where(grants.c.grant_id == grant_id)).first()
        return grant_record(row) if row is not None else None

    def expire_due(self) -> list[ApprovalRecord]:
        """Every pending approval past its expiry expired (`approval.expire`), in one transaction."""
        with self._tx() as conn:
            now = self._now(conn)
            due = and_(approvals.c.status == "pending", approvals.c.expires_at <= now)
            lock_runs(conn, select(runs.c.run_id).where(runs.c.run_id.in_(select(approvals.c.run_id).where(due))))
            changes = [expire(approval, now) for approval in approvals_where(conn, due) if overdue(approval, now)]
            save_changes(conn, changes, now)
        return [change.after for change in changes]

    def set_approval_message(self, approval_id: str, message: dict[str, Any]) -> ApprovalRecord | None:
        """Record where the request was posted (showing it pending); returns the approval as it is now."""
        with self._tx() as conn:
            conn.execute(update(approvals).where(approvals.c.approval_id == approval_id)
                         .values(message=canonical_json(message), shown_status="pending"))
            row = conn.execute(select(approvals).where(approvals.c.approval_id == approval_id)).first()
        return approval_record(row) if row else None

    def mark_approval_shown(self, approval_id: str, status: str) -> None:
        with self._tx() as conn:
            conn.execute(update(approvals).where(approvals.c.approval_id == approval_id)
                         .values(shown_status=status))

    def mark_run_shown(self, run_id: str, status: str) -> None:
        with self._tx() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(shown_status=status))


def _lease_params(run_id: str, owner: str, now: datetime, lease: timedelta) -> dict[str, Any]:
    return {"b_run_id": run_id, "b_owner": owner, "b_now": now, "b_until": now + lease}


def _started(conn: Connection, key: str, run_id: str, tool: str, digest: str, now: datetime,
             **why: str | int) -> Fresh:
    """The ledger row of a call starting now, its first attempt, with the event saying what let it."""
    conn.execute(INSERT_EXECUTION, {"key": key, "run_id": run_id, "tool": tool, "digest": digest,
                                    "status": "started", "attempts": 1, "started_at": now})
    append_events(conn, run_id, [execution_started(key, tool, **why)], now)
    return Fresh(1)


def _closed(conn: Connection, now: datetime, whose: ColumnElement[bool], *,
            status: ApprovalStatus) -> list[ApprovalRecord]:
    """Close the open approvals `whose` selects as `status`; returns them as they are now."""
    changes = [change for approval in approvals_where(conn, whose, approvals.c.status.in_(OPEN))
               if (change := close(approval, status, now)) is not None]
    save_changes(conn, changes, now)
    return [change.after for change in changes]


if TYPE_CHECKING:
    from signoff.runtime.ports import Store

    def _keeps_the_contract(store: SqlStore) -> Store:
        return store  # mypy checks every method against the Protocol
