"""Approvals and grants as rows: loaded whole, saved as `approval.Change`s. No rule is decided here.

The SQL store loads an approval with every vote it has, hands it to a transition of
`runtime/approval.py` and saves what came back with `save_changes`, in the caller's transaction.
Each change is written as a compare-and-set on the status it was loaded with: the run's row is
held first (see `rows.lock_runs`), so it always holds, and a write that found otherwise raises
`Conflict` and rolls back rather than save a decision made on a stale approval.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, insert, select, update
from sqlalchemy.engine import Row

from signoff.runtime.adapters.notice_rows import owe
from signoff.runtime.adapters.rows import append_events, append_one_event_each, approval_record, grant_record
from signoff.runtime.adapters.statements import INSERT_VOTE
from signoff.runtime.adapters.tables import approval_votes, approvals, grants, receipts
from signoff.runtime.approval_change import Change
from signoff.runtime.approval_events import as_events
from signoff.runtime.errors import Conflict
from signoff.runtime.records import ApprovalRecord, GrantRecord, Vote
from signoff.runtime.state import canonical_json

_JSON_COLUMNS = ("args", "message", "asked", "asked_with", "glass", "glass_review", "glass_message")


def approvals_where(conn: Connection, *conditions: ColumnElement[bool], limit: int | None = None,
                    order: Any = None) -> list[ApprovalRecord]:
    """The approvals matching `conditions`, each with all its votes, held until the transaction
    ends (the caller has locked their runs' rows first)."""
    query = select(approvals).where(*conditions).with_for_update()
    if order is not None:
        query = query.order_by(*(order if isinstance(order, tuple) else (order,)))
    if limit is not None:
        query = query.limit(limit)
    return with_all_votes(conn, conn.execute(query).all())


def with_all_votes(conn: Connection, rows: Sequence[Row[Any]]) -> list[ApprovalRecord]:
    """The approvals in `rows` with every vote counted on them, whatever their quorum (one query)."""
    if not rows:
        return []
    votes: dict[str, list[Vote]] = defaultdict(list)
    for vote in conn.execute(select(approval_votes).where(approval_votes.c.approval_id.in_(
            [row.approval_id for row in rows])).order_by(approval_votes.c.approval_id, approval_votes.c.seq)).all():
        votes[vote.approval_id].append(Vote(user=vote.user_id, approved=vote.approved, at=vote.at, note=vote.note))
    return [approval_record(row, tuple(votes[row.approval_id])) for row in rows]


def insert_approval(conn: Connection, approval: ApprovalRecord) -> None:
    conn.execute(insert(approvals).values(**_columns(_fields(approval))))


def insert_grant(conn: Connection, grant: GrantRecord) -> None:
    values = {name: getattr(grant, name) for name in (column.name for column in grants.c)}
    conn.execute(insert(grants).values(**{**values, "same": canonical_json(grant.same)}))


def grant_row(conn: Connection, grant_id: str) -> GrantRecord | None:
    """The grant `grant_id`, held until the transaction ends."""
    row = conn.execute(select(grants).where(grants.c.grant_id == grant_id).with_for_update()).first()
    return grant_record(row) if row is not None else None


def insert_receipt(conn: Connection, receipt: dict[str, Any], now: datetime) -> None:
    """Keep a signed receipt, in the transaction of the decision it is the receipt of."""
    fields = receipt["receipt"]
    conn.execute(insert(receipts).values(run_id=fields["run_id"], approval_id=fields["approval_id"],
                                         key=fields["key"], key_id=fields["key_id"],
                                         receipt=canonical_json(receipt), created_at=now))


def save_grant_use(conn: Connection, grant: GrantRecord) -> None:
    conn.execute(update(grants).where(grants.c.grant_id == grant.grant_id)
                 .values(uses=grant.uses, last_used_at=grant.last_used_at))


def save_changes(conn: Connection, changes: Sequence[Change], now: datetime) -> None:
    """Write `changes` whole: each approval's fields, its vote, its grant, its run's events and the
    messages it owes (the outbox, `notices`).

    Approvals changed alike (a sweep expiring a thousand) are written by one statement, and runs
    with one event each have them appended by two, whatever their number.
    """
    alike: dict[tuple[str, str], tuple[dict[str, Any], list[str]]] = {}
    for change in changes:
        values = _columns(change.changed)
        if values:
            group = alike.setdefault((change.before.status, canonical_json(_comparable(values))), (values, []))
            group[1].append(change.before.approval_id)
    for (status, _), (values, ids) in alike.items():
        written = conn.execute(update(approvals).where(approvals.c.approval_id.in_(ids), approvals.c.status == status)
                               .values(**values)).rowcount
        if written != len(ids):
            raise Conflict(f"approvals {ids} changed while being decided; nothing was saved")
    for change in changes:
        if change.vote is not None:
            conn.execute(INSERT_VOTE, {"approval_id": change.before.approval_id, "user_id": change.vote.user,
                                       "seq": len(change.before.votes) + 1, "approved": change.vote.approved,
                                       "note": change.vote.note, "at": change.vote.at})
        if change.grant is not None:
            insert_grant(conn, change.grant)
    _append(conn, changes, now)
    owe(conn, ((change.after.run_id, notice) for change in changes for notice in change.notices), now)


def _append(conn: Connection, changes: Sequence[Change], now: datetime) -> None:
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for change in changes:
        by_run[change.before.run_id].extend(as_events(change.events))
    by_run = {run_id: events for run_id, events in by_run.items() if events}
    if len(by_run) > 1 and all(len(events) == 1 for events in by_run.values()):
        append_one_event_each(conn, {run_id: events[0] for run_id, events in by_run.items()}, now)
        return
    for run_id, events in by_run.items():
        append_events(conn, run_id, events, now)


def _fields(approval: ApprovalRecord) -> dict[str, Any]:
    return {name: getattr(approval, name) for name in (column.name for column in approvals.c)}


def _columns(fields: dict[str, Any]) -> dict[str, Any]:
    """An approval's fields as its row's columns: its JSON fields as canonical text."""
    return {name: canonical_json(value) if name in _JSON_COLUMNS and value is not None else value
            for name, value in fields.items()}


def _comparable(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value.isoformat() if hasattr(value, "isoformat") else value for name, value in values.items()}

