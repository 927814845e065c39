"""The outbox in SQL (`notices`): messages owed to people, taken one take at a time.

An approval's notice is taken by a compare-and-set on `next_at`: of two replicas taking the same
one, the second finds it moved a fence ahead (PostgreSQL re-reads the row it waited for; SQLite
writes one at a time) and leaves it; a redraw is left open (`notices.Redraw`). Only the first
notice owed of an approval is taken, so that its messages go out in the order they were owed.

A run's own notices (`notices.RunNotice`) are fenced by the run's lease instead: they are read, not
taken, by the holder, and a run whose lease is free with some due is a run to recover. A card's is
also fenced past the lease just before it is posted (`hold_notice`), as a take would fence it.
"""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import case, delete, or_, select, update
from sqlalchemy.orm import aliased

from signoff.runtime.adapters.notice_rows import KNOWN, OF_RUN, due_of_run
from signoff.runtime.adapters.sql_approvals import SqlTransactions
from signoff.runtime.adapters.tables import notices, runs
from signoff.runtime.notices import UNFENCED, HeldNotice, notice_from


class SqlNotices(SqlTransactions):
    def take_notices(self, fence: timedelta, *, run_id: str | None = None, limit: int = 50) -> list[HeldNotice]:
        earlier = aliased(notices)
        first = ~select(earlier.c.seq).where(earlier.c.approval_id == notices.c.approval_id,
                                             earlier.c.seq < notices.c.seq).exists()
        query = select(notices.c.seq).where(KNOWN, ~OF_RUN, first)
        if run_id is not None:
            query = query.where(notices.c.run_id == run_id)
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

    def run_notices(self, run_id: str, limit: int = 50) -> list[HeldNotice]:
        with self.engine.connect() as conn:
            return due_of_run(conn, run_id, self._now(conn), limit)

    def hold_notice(self, seq: int, fence: timedelta) -> bool:
        with self._tx() as conn:
            fenced = update(notices).where(notices.c.seq == seq).values(next_at=self._now(conn) + fence)
            return conn.execute(fenced).rowcount == 1

    def runs_owed_notices(self, older_than: timedelta, *, limit: int = 50) -> list[str]:
        with self.engine.connect() as conn:
            now = self._now(conn)
            free = or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at < now)
            earlier = aliased(notices)
            first = ~select(earlier.c.seq).where(earlier.c.run_id == notices.c.run_id, earlier.c.approval_id.is_(None),
                                                 earlier.c.seq < notices.c.seq).exists()
            return list(conn.execute(
                select(notices.c.run_id).join(runs, runs.c.run_id == notices.c.run_id)
                .where(OF_RUN, KNOWN, first, notices.c.next_at <= now, notices.c.made_at < now - older_than, free)
                .group_by(notices.c.run_id).order_by(notices.c.run_id).limit(limit)).scalars())

    def notice_sent(self, seq: int) -> None:
        with self._tx() as conn:
            conn.execute(delete(notices).where(notices.c.seq == seq))

    def notice_failed(self, seq: int, retry_in: timedelta, error: str) -> None:
        with self._tx() as conn:
            conn.execute(update(notices).where(notices.c.seq == seq)
                         .values(next_at=self._now(conn) + retry_in, last_error=error[:500],
                                 tries=case((OF_RUN, notices.c.tries + 1), else_=notices.c.tries)))
