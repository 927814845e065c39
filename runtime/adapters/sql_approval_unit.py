"""The SQL store's unit of work (`approval_unit.ApprovalUnit`): one write transaction, each
approval's run row taken before the approval's, as every writer takes them (`rows.lock_runs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, select, update

from signoff.runtime.adapters.approval_rows import (
    approvals_where,
    grant_row,
    insert_approval,
    insert_receipt,
    save_changes,
    save_grant_use,
)
from signoff.runtime.adapters.notice_rows import owe
from signoff.runtime.adapters.rows import append_events, json_or, loads, lock_runs
from signoff.runtime.adapters.statements import (
    EXECUTION_BY_KEY,
    FENCE,
    HELD_RUN,
    INSERT_EXECUTION,
    LOCK_RUN,
    RUN_OF_APPROVAL,
    TAKE_FREE_LEASE,
    lease_params,
)
from signoff.runtime.adapters.tables import approvals, runs, tool_executions
from signoff.runtime.approval_change import Change
from signoff.runtime.approval_unit import Due, HeldRun, LedgerRow
from signoff.runtime.notices import Notice
from signoff.runtime.records import ApprovalRecord, GrantRecord
from signoff.runtime.state import canonical_json

ASKED_ORDER = (approvals.c.requested_at, approvals.c.approval_id)
"""Oldest first, and the approvals a step asked at once by id, as the memory store orders them."""


class SqlApprovalUnit:
    """One transaction on `conn`, begun at `now` by the database's clock."""

    def __init__(self, conn: Connection, now: datetime) -> None:
        self.conn, self.now = conn, now

    def approval(self, approval_id: str) -> ApprovalRecord | None:
        run_id = self.conn.execute(RUN_OF_APPROVAL, {"b_approval_id": approval_id}).scalar()
        if run_id is None:
            return None
        self.conn.execute(LOCK_RUN, {"b_run_id": run_id})
        [approval] = approvals_where(self.conn, approvals.c.approval_id == approval_id)
        return approval

    def due(self, which: Due, limit: int | None = None) -> list[ApprovalRecord]:
        where, order = self._due(which)
        lock_runs(self.conn, select(runs.c.run_id).where(runs.c.run_id.in_(select(approvals.c.run_id).where(where))))
        return approvals_where(self.conn, where, order=order, limit=limit)

    def _due(self, which: Due) -> tuple[ColumnElement[bool], Any]:
        """The rows `which` names, and their order: an index's pick, which the transition confirms."""
        match which:
            case Due.EXPIRY:
                return and_(approvals.c.status == "pending", approvals.c.expires_at <= self.now), approvals.c.expires_at
            case Due.NUDGE:
                return (and_(approvals.c.status == "pending", approvals.c.nudge_at <= self.now,
                             approvals.c.expires_at > self.now), approvals.c.nudge_at)
            case Due.GLASS:
                return (and_(approvals.c.glass_due_at <= self.now, approvals.c.glass_review.is_(None)),
                        approvals.c.glass_due_at)

    def save(self, changes: Sequence[Change]) -> None:
        save_changes(self.conn, changes, self.now)

    def keep_receipt(self, receipt: Mapping[str, Any]) -> None:
        insert_receipt(self.conn, dict(receipt), self.now)

    def take_lease(self, run_id: str, owner: str, lease: timedelta) -> bool:
        return self.conn.execute(TAKE_FREE_LEASE, lease_params(run_id, owner, self.now, lease)).rowcount == 1

    def run(self, run_id: str) -> HeldRun | None:
        row = self.conn.execute(HELD_RUN, {"b_run_id": run_id}).first()
        return HeldRun(row.requester, row.status, row.version, json_or(row.command, None)) if row is not None else None

    def of_run(self, run_id: str, statuses: Sequence[str]) -> list[ApprovalRecord]:
        return approvals_where(self.conn, approvals.c.run_id == run_id, approvals.c.status.in_(statuses),
                               order=ASKED_ORDER)

    def under_key(self, key: str) -> list[ApprovalRecord]:
        return approvals_where(self.conn, approvals.c.key == key, order=ASKED_ORDER)

    def open_approval(self, approval: ApprovalRecord) -> None:
        insert_approval(self.conn, approval)

    def leave_command(self, run_id: str, command: dict[str, Any]) -> None:
        self.conn.execute(update(runs).where(runs.c.run_id == run_id)
                          .values(command=canonical_json(command), updated_at=self.now))

    def renew_lease(self, run_id: str, owner: str, lease: timedelta) -> HeldRun | None:
        held = self.conn.execute(FENCE, lease_params(run_id, owner, self.now, lease)).first()
        if held is None:
            return None
        return HeldRun(held.requester, held.status, held.version, json_or(held.command, None))

    def execution(self, key: str) -> LedgerRow | None:
        row = self.conn.execute(EXECUTION_BY_KEY, {"b_key": key}).first()
        return LedgerRow(row.key, row.status, row.attempts, loads(row.result), row.error) if row is not None else None

    def latest_approval(self, key: str) -> ApprovalRecord | None:
        found = approvals_where(self.conn, approvals.c.key == key, approvals.c.status != "superseded",
                                order=approvals.c.requested_at.desc(), limit=1)
        return found[0] if found else None

    def grant(self, grant_id: str) -> GrantRecord | None:
        return grant_row(self.conn, grant_id)

    def save_grant_use(self, grant: GrantRecord) -> None:
        save_grant_use(self.conn, grant)

    def start_execution(self, run_id: str, key: str, tool: str, digest: str) -> None:
        self.conn.execute(INSERT_EXECUTION, {"key": key, "run_id": run_id, "tool": tool, "digest": digest,
                                             "status": "started", "attempts": 1, "started_at": self.now})

    def restart_execution(self, key: str, attempts: int) -> None:
        self.conn.execute(update(tool_executions).where(tool_executions.c.key == key,
                                                        tool_executions.c.status == "started")
                          .values(attempts=attempts, started_at=self.now, finished_at=None))

    def use_up_command(self, run_id: str, version: int) -> None:
        self.conn.execute(update(runs).where(runs.c.run_id == run_id).values(command=None, version=version))

    def append(self, run_id: str, events: list[dict[str, Any]]) -> None:
        append_events(self.conn, run_id, events, self.now)

    def owe(self, run_id: str, notices: Iterable[Notice]) -> None:
        owe(self.conn, [(run_id, notice) for notice in notices], self.now)
