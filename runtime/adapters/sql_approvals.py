"""The SQL store's writes of approvals, grants and the execution ledger, each one transaction.

The commands that change approvals and start calls (`approval_commands`, `starting_calls`) run in
the unit of work `approval_unit` opens (`sql_approval_unit.SqlApprovalUnit`); what is left here
records an outcome, where a card was posted, and a grant's revocation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, and_, or_, select, update

from signoff.runtime.adapters.approval_rows import with_all_votes
from signoff.runtime.adapters.db import WRITE_OPTION
from signoff.runtime.adapters.reads import SqlReads
from signoff.runtime.adapters.rows import (
    append_events,
    approval_record,
    finish_execution,
    grant_record,
)
from signoff.runtime.adapters.sql_approval_unit import SqlApprovalUnit
from signoff.runtime.adapters.tables import approvals, grants
from signoff.runtime.events import grant_revoked
from signoff.runtime.records import ApprovalRecord, GrantRecord
from signoff.runtime.state import canonical_json


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

    def complete_execution(self, execution: dict[str, Any]) -> None:
        """Record an outcome outside a step (its step could not be saved)."""
        with self._tx() as conn:
            finish_execution(conn, execution, self._now(conn))

    # -- approvals and break-glass ------------------------------------------------------

    @contextmanager
    def approval_unit(self) -> Iterator[SqlApprovalUnit]:
        """One write transaction over approvals, grants and the ledger (a command runs in it)."""
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
