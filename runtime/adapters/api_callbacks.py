"""Which decided approvals still owe their caller a callback, in SQL: a row per callback tried, its
`next_at` both the backoff and the fence that keeps two replicas off one attempt."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from signoff.runtime.adapters.sql_approvals import SqlTransactions
from signoff.runtime.adapters.tables import api_callbacks, runs
from signoff.runtime.caller_runs import MODEL

UNDECIDED = ("idle", "running", "awaiting_approval")
"""A caller's run in these has no decision to call back about yet."""


class SqlCallbacks(SqlTransactions):
    def due(self, window: timedelta, limit: int = 50) -> list[str]:
        """Caller runs decided within `window` that asked for a callback, not delivered and not
        being tried now (oldest first)."""
        with self.engine.connect() as conn:
            now = self._now(conn)
            settled = select(api_callbacks.c.run_id).where(
                api_callbacks.c.run_id == runs.c.run_id,
                or_(api_callbacks.c.delivered_at.is_not(None), api_callbacks.c.next_at > now)).exists()
            query = (select(runs.c.run_id)
                     .where(runs.c.model == MODEL, runs.c.status.not_in(UNDECIDED), runs.c.updated_at >= now - window,
                            runs.c.origin.contains('"callback_url"'), ~settled)
                     .order_by(runs.c.updated_at).limit(limit))
            return list(conn.execute(query).scalars().all())

    def claim(self, run_id: str, fence: timedelta) -> int | None:
        """Take the next attempt of `run_id`'s callback for `fence` (no other replica tries it
        meanwhile): its number, or None when it is delivered, or tried now elsewhere."""
        with self._tx() as conn:
            now = self._now(conn)
            taken = conn.execute(update(api_callbacks)
                                 .where(api_callbacks.c.run_id == run_id, api_callbacks.c.delivered_at.is_(None),
                                        api_callbacks.c.next_at <= now)
                                 .values(attempts=api_callbacks.c.attempts + 1, next_at=now + fence)
                                 .returning(api_callbacks.c.attempts)).scalar()
            if taken is not None:
                return int(taken)
            try:
                with conn.begin_nested():
                    conn.execute(insert(api_callbacks).values(run_id=run_id, attempts=1, next_at=now + fence))
            except IntegrityError:  # tried before: delivered, or its next attempt is not due
                return None
            return 1

    def delivered(self, run_id: str) -> None:
        with self._tx() as conn:
            conn.execute(update(api_callbacks).where(api_callbacks.c.run_id == run_id)
                         .values(delivered_at=self._now(conn), last_error=None))

    def failed(self, run_id: str, error: str, retry_in: timedelta) -> None:
        with self._tx() as conn:
            now = self._now(conn)
            conn.execute(update(api_callbacks).where(and_(api_callbacks.c.run_id == run_id,
                                                          api_callbacks.c.delivered_at.is_(None)))
                         .values(next_at=now + retry_in, last_error=error[:500]))
