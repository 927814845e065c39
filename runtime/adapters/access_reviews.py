"""Reviews of standing access in SQL (`access_reviews.AccessReviews`), in the store's database, on its clock."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from signoff.runtime.access_reviews import (
    AccessReview,
    NudgeKind,
    ReviewLine,
    RunEvent,
    SubjectKind,
    Verdict,
)
from signoff.runtime.adapters.rows import append_events
from signoff.runtime.adapters.sql_approvals import SqlTransactions
from signoff.runtime.adapters.tables import access_review_lines, access_reviews, runs

_NUDGED = {"remind": access_reviews.c.reminded_at, "escalate": access_reviews.c.escalated_at}


def new_review_id() -> str:
    return "rev_" + secrets.token_urlsafe(12)


class SqlAccessReviews(SqlTransactions):
    def has_review(self, period: datetime) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(select(access_reviews.c.review_id).where(access_reviews.c.period == period)).first() \
                is not None

    def open_review(self, period: datetime, lines: Sequence[tuple[SubjectKind, str]], posting_for_s: float,
                    audit: Callable[[str], Sequence[RunEvent]]) -> AccessReview | None:
        review_id = new_review_id()
        try:
            with self._tx() as conn:
                now = self._now(conn)
                # The period is unique: a second replica's INSERT fails here and it posts nothing.
                conn.execute(insert(access_reviews).values(
                    review_id=review_id, period=period, opened_at=now,
                    posting_until=now + timedelta(seconds=posting_for_s)))
                if lines:
                    conn.execute(insert(access_review_lines), [
                        {"review_id": review_id, "kind": kind, "subject": subject, "position": n}
                        for n, (kind, subject) in enumerate(lines)])
                _write_audit(conn, audit(review_id), now)
        except IntegrityError:
            return None
        return self.get_review(review_id)

    def take_unposted(self, posting_for_s: float) -> list[AccessReview]:
        with self.engine.connect() as conn:  # read first: every replica asks on every tick, and there is rarely one
            if conn.execute(select(access_reviews.c.review_id).where(access_reviews.c.ts.is_(None))).first() is None:
                return []
        with self._tx() as conn:
            now = self._now(conn)
            taken = conn.execute(
                update(access_reviews)
                .where(access_reviews.c.ts.is_(None), access_reviews.c.posting_until < now)
                .values(posting_until=now + timedelta(seconds=posting_for_s))
                .returning(access_reviews.c.review_id)).scalars().all()
        return [review for review_id in taken if (review := self.get_review(review_id)) is not None]

    def posted(self, review_id: str, channel: str, ts: str) -> AccessReview | None:
        with self._tx() as conn:
            conn.execute(update(access_reviews).where(access_reviews.c.review_id == review_id)
                         .values(channel=channel, ts=ts, posted_at=self._now(conn), posting_until=None))
        return self.get_review(review_id)

    def get_review(self, review_id: str) -> AccessReview | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(access_reviews).where(access_reviews.c.review_id == review_id)).first()
            if row is None:
                return None
            return _review(row, _lines(conn, review_id))

    def latest_review_id(self) -> str | None:
        with self.engine.connect() as conn:
            found = conn.execute(select(access_reviews.c.review_id)
                                 .order_by(access_reviews.c.period.desc()).limit(1)).scalar()
        return str(found) if found is not None else None

    def answer(self, review_id: str, kind: SubjectKind, subject: str, verdict: Verdict, user: str,
               audit: Sequence[RunEvent] = ()) -> bool:
        undecided: ColumnElement[bool] = access_review_lines.c.verdict.is_(None)
        if verdict == "revoke":
            undecided = or_(undecided, access_review_lines.c.verdict == "keep")
        with self._tx() as conn:
            now = self._now(conn)
            # Answered once: the WHERE clause lets exactly one of two racing clicks through.
            won = conn.execute(update(access_review_lines).where(
                access_review_lines.c.review_id == review_id, access_review_lines.c.kind == kind,
                access_review_lines.c.subject == subject, undecided,
            ).values(verdict=verdict, decided_by=user, decided_at=now)).rowcount == 1
            if won:
                _write_audit(conn, audit, now)
        return won

    def take_nudge(self, review_id: str, kind: NudgeKind) -> bool:
        column = _NUDGED[kind]
        with self._tx() as conn:
            return conn.execute(update(access_reviews).where(
                access_reviews.c.review_id == review_id, column.is_(None),
            ).values({column.name: self._now(conn)})).rowcount == 1


def _write_audit(conn: Connection, audit: Sequence[RunEvent], at: datetime) -> None:
    for run_id, event in audit:
        # A grant outlives nothing of its run's log: a run erased since has no log to write to.
        if conn.execute(select(runs.c.run_id).where(runs.c.run_id == run_id)).first() is not None:
            append_events(conn, run_id, [event], at)


def _lines(conn: Connection, review_id: str) -> tuple[ReviewLine, ...]:
    rows = conn.execute(select(access_review_lines).where(access_review_lines.c.review_id == review_id)
                        .order_by(access_review_lines.c.position)).all()
    return tuple(ReviewLine(kind=r.kind, subject=r.subject, verdict=r.verdict, decided_by=r.decided_by,
                            decided_at=r.decided_at) for r in rows)


def _review(row: Any, lines: tuple[ReviewLine, ...]) -> AccessReview:
    return AccessReview(review_id=row.review_id, period=row.period, opened_at=row.opened_at, lines=lines,
                        channel=row.channel, ts=row.ts, posted_at=row.posted_at, reminded_at=row.reminded_at,
                        escalated_at=row.escalated_at)
