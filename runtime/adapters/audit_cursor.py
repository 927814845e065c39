"""The audit webhook's cursor in SQL (`audit_webhook.AuditCursor`): one row, its lease taken as a
run's is (a conditional `UPDATE`), and the cursor moved only by the lease's holder, from the value
it read (a compare-and-set), so two replicas never both move it."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from signoff.runtime.adapters.sql_approvals import SqlTransactions
from signoff.runtime.adapters.tables import audit_webhook, events
from signoff.runtime.audit import EventRow
from signoff.runtime.audit_webhook import DeliveryStatus

CURSOR = audit_webhook.c.id == 1


class SqlAuditCursor(SqlTransactions):
    """The cursor row and the events after it, in the store's database, on the store's clock."""

    def start(self, target: str) -> str:
        """Make the cursor at the log's end, or move it there when it was made for another URL."""
        with self._tx() as conn:
            now = self._now(conn)
            row = conn.execute(select(audit_webhook.c.target, audit_webhook.c.source).where(CURSOR)).first()
            if row is None:
                return self._make(conn, target, now)
            if row.target != target:
                conn.execute(update(audit_webhook).where(CURSOR).values(
                    target=target, through=_log_end(conn), started_at=now, failures=0, failing_since=None,
                    last_error=None))
            return str(row.source)

    def _make(self, conn: Connection, target: str, now: datetime) -> str:
        source = f"urn:uuid:{uuid.uuid4()}"
        try:
            with conn.begin_nested():
                conn.execute(insert(audit_webhook).values(id=1, target=target, source=source,
                                                          through=_log_end(conn), started_at=now))
        except IntegrityError:  # another replica made it first: its row stands
            return str(conn.execute(select(audit_webhook.c.source).where(CURSOR)).scalar_one())
        return source

    def claim(self, owner: str, lease: timedelta) -> int | None:
        with self._tx() as conn:
            now = self._now(conn)
            free = or_(audit_webhook.c.lease_owner.is_(None), audit_webhook.c.lease_owner == owner,
                       audit_webhook.c.lease_expires_at < now)
            taken = conn.execute(update(audit_webhook).where(CURSOR, free)
                                 .values(lease_owner=owner, lease_expires_at=now + lease)).rowcount
            if taken != 1:
                return None
            return int(conn.execute(select(audit_webhook.c.through).where(CURSOR)).scalar_one())

    def after(self, through: int, limit: int) -> list[tuple[int, EventRow]]:
        query = (select(events.c.id, events.c.run_id, events.c.seq, events.c.type, events.c.at, events.c.payload,
                        events.c.prev_hash, events.c.hash)
                 .where(events.c.id > through).order_by(events.c.id).limit(limit))
        with self.engine.connect() as conn:
            return [(row.id, EventRow(run_id=row.run_id, seq=row.seq, type=row.type, at=row.at, payload=row.payload,
                                      prev=row.prev_hash, hash=row.hash)) for row in conn.execute(query)]

    def advance(self, owner: str, through: int, to: int) -> bool:
        with self._tx() as conn:
            now = self._now(conn)
            return conn.execute(update(audit_webhook).where(*self._held(owner, now), audit_webhook.c.through == through)
                                .values(through=to, delivered_at=now, failures=0, failing_since=None,
                                        last_error=None)).rowcount == 1

    def failed(self, owner: str, error: str) -> None:
        with self._tx() as conn:
            now = self._now(conn)
            conn.execute(update(audit_webhook).where(*self._held(owner, now)).values(
                failures=audit_webhook.c.failures + 1, last_error=error[:500],
                failing_since=func.coalesce(audit_webhook.c.failing_since, now)))

    @staticmethod
    def _held(owner: str, now: datetime) -> tuple[Any, ...]:
        return CURSOR, audit_webhook.c.lease_owner == owner, audit_webhook.c.lease_expires_at > now

    def status(self) -> DeliveryStatus | None:
        with self.engine.connect() as conn:
            now = self._now(conn)
            row = conn.execute(select(audit_webhook).where(CURSOR)).first()
            if row is None:
                return None
            behind = conn.execute(select(func.count()).select_from(events).where(events.c.id > row.through)).scalar_one()
            oldest = conn.execute(select(events.c.at).where(events.c.id > row.through).order_by(events.c.id)
                                  .limit(1)).scalar()
        return DeliveryStatus(target=row.target, through=row.through, behind=behind, oldest_behind=oldest,
                              failing_since=row.failing_since, failures=row.failures, last_error=row.last_error,
                              now=now)


def _log_end(conn: Connection) -> int:
    """The number of the last event written: a cursor here delivers only what is written from now on."""
    return int(conn.execute(select(func.coalesce(func.max(events.c.id), 0))).scalar_one())
