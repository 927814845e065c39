"""The outbox in SQL (`notices`): messages owed to people, taken one take at a time.

A take is a compare-and-set on `next_at`: of two replicas taking the same notice, the second
finds it moved a fence ahead (PostgreSQL re-reads the row it waited for; SQLite writes one at a
time) and leaves it; a redraw is left open (`notices.Redraw`). Only the first notice owed of an
approval is taken, so that its messages go out in the order they were owed.
"""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import case, delete, select, update
from sqlalchemy.orm import aliased

from signoff.runtime.adapters.sql_approvals import SqlTransactions
from signoff.runtime.adapters.tables import notices
from signoff.runtime.notices import KINDS, UNFENCED, HeldNotice, notice_from


class SqlNotices(SqlTransactions):
    def take_notices(self, fence: timedelta, *, approval_id: str | None = None, limit: int = 50) -> list[HeldNotice]:
        earlier = aliased(notices)
        first = ~select(earlier.c.seq).where(earlier.c.approval_id == notices.c.approval_id,
                                             earlier.c.seq < notices.c.seq).exists()
        query = select(notices.c.seq).where(notices.c.kind.in_(sorted(KINDS)), first)
        if approval_id is not None:
            query = query.where(notices.c.approval_id == approval_id)
        with self.engine.connect() as conn:  # looked for first without the write lock: mostly nothing is owed
            if not conn.execute(query.where(notices.c.next_at <= self._now(conn)).limit(1)).first():
                return []
        with self._tx() as conn:
            now = self._now(conn)
            held = []
            due = query.where(notices.c.next_at <= now).order_by(notices.c.seq).limit(limit)
            for seq in conn.execute(due).scalars().all():
                fenced = case((notices.c.kind.in_(sorted(UNFENCED)), notices.c.next_at), else_=now + fence)
                row = conn.execute(update(notices).where(notices.c.seq == seq, notices.c.next_at <= now)
                                   .values(next_at=fenced, tries=notices.c.tries + 1)
                                   .returning(notices)).one_or_none()
                if row is not None:
                    held.append(HeldNotice(row.seq, row.run_id, notice_from(row.kind, row.approval_id, json.loads(row.body)),
                                           row.made_at, row.tries))
            return held

    def notice_sent(self, seq: int) -> None:
        with self._tx() as conn:
            conn.execute(delete(notices).where(notices.c.seq == seq))

    def notice_failed(self, seq: int, retry_in: timedelta, error: str) -> None:
        with self._tx() as conn:
            conn.execute(update(notices).where(notices.c.seq == seq)
                         .values(next_at=self._now(conn) + retry_in, last_error=error[:500]))
