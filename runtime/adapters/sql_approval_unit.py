"""The SQL store's unit of work over approvals (`approval_unit.ApprovalUnit`): one write transaction,
each approval's run row taken before the approval's, as every writer takes them (`rows.lock_runs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, select

from signoff.runtime.adapters.approval_rows import approvals_where, insert_receipt, save_changes
from signoff.runtime.adapters.rows import lock_runs
from signoff.runtime.adapters.statements import LOCK_RUN, RUN_OF_APPROVAL, TAKE_FREE_LEASE, lease_params
from signoff.runtime.adapters.tables import approvals, runs
from signoff.runtime.approval_change import Change
from signoff.runtime.approval_unit import Due
from signoff.runtime.records import ApprovalRecord


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
