"""The store's reads: each is one query (or two) on a pooled connection, taking no write lock.

`SqlStore` adds the writes, each one transaction; `SqlReads` alone is what a report or a
dashboard would need.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, Select, and_, func, or_, select, text

from signoff.runtime.adapters.rows import loads, run_record, with_votes
from signoff.runtime.adapters.statements import APPROVAL_BY_ID, APPROVAL_BY_KEY, HISTORY_OF_RUN, RUN_BY_ID
from signoff.runtime.adapters.tables import (
    approvals,
    audit_head,
    events,
    receipts,
    run_chain,
    runs,
    tool_executions,
)
from signoff.runtime.approval import DECIDED
from signoff.runtime.audit import WHOLE_LOG, EventRow, Head, Link, Record, RunRow, Seal, Selection
from signoff.runtime.receipt_check import ExecutionRow, Proof, ReceiptRow
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.rules import COMMANDS_LOOKED_AT
from signoff.runtime.schema import ACTIVE, WAITING_ON_CALLER

_SERVER_NOW = text("SELECT now()")


def utcnow() -> datetime:
    return datetime.now(UTC)


class SqlReads:
    """Runs, approvals, events and executions as stored, read without a write transaction.

    Every lease, expiry and sweep is measured by one clock, the database's: replicas whose own
    clocks disagree still agree on who holds a run and whether an approval is still open.
    PostgreSQL's is its server's `now()`, read in the transaction that uses it. SQLite has no
    server: its clock is that of the host whose file every process shares, which is the clock
    this process reads. `clock` replaces it in tests that move time by hand.
    """

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] | None = None) -> None:
        self.engine = engine
        self.clock = clock
        self._server_clock = engine.dialect.name == "postgresql"

    def close(self) -> None:
        """Close the engine's pooled connections (before a fork); it opens new ones when next used."""
        self.engine.dispose()

    def now(self) -> datetime:
        """The database's time now (see the class docstring)."""
        with self.engine.connect() as conn:
            return self._now(conn)

    def _now(self, conn: Connection) -> datetime:
        """The database's time, as `conn`'s transaction sees it."""
        if self.clock is not None:
            return self.clock()
        if self._server_clock:
            moment: datetime = conn.execute(_SERVER_NOW).scalar_one()
            return moment.astimezone(UTC)
        return utcnow()

    def run_for_request(self, request_id: str | None) -> RunRecord | None:
        if request_id is None:
            return None
        with self.engine.connect() as conn:
            run_id = conn.execute(select(runs.c.run_id).where(runs.c.request_id == request_id)).scalar()
        return self.get_run(run_id, history=False) if run_id else None

    def get_run(self, run_id: str, *, history: bool = True) -> RunRecord | None:
        """One run; `history=False` skips the history for callers that only need the row."""
        with self.engine.connect() as conn:
            row = conn.execute(RUN_BY_ID, {"b_run_id": run_id}).first()
            if row is None:
                return None
            if not history:
                return run_record(row, None)
            entries = conn.execute(HISTORY_OF_RUN, {"b_run_id": run_id}).scalars().all()
        return run_record(row, [json.loads(e) for e in entries])

    def executions(self, run_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(tool_executions).where(tool_executions.c.run_id == run_id)
                                .order_by(tool_executions.c.started_at)).all()
        return [dict(r._mapping, result=loads(r.result)) for r in rows]

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return self._one_approval(APPROVAL_BY_ID, {"b_approval_id": approval_id})

    def approval_for_key(self, key: str) -> ApprovalRecord | None:
        """The call's approval in force (or, when none is, its latest)."""
        return self._one_approval(APPROVAL_BY_KEY, {"b_key": key})

    def _one_approval(self, query: Any, params: dict[str, str]) -> ApprovalRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(query, params).first()
            return with_votes(conn, [row])[0] if row else None

    def list_approvals(self, *, status: str | None = None, run_id: str | None = None,
                       exclude_requester: str | None = None, limit: int = 50) -> list[ApprovalRecord]:
        query = select(approvals).order_by(approvals.c.requested_at.desc()).limit(limit)
        if status:
            query = query.where(approvals.c.status == status)
        if run_id:
            query = query.where(approvals.c.run_id == run_id)
        if exclude_requester:
            query = query.where(approvals.c.requester != exclude_requester)
        with self.engine.connect() as conn:
            return with_votes(conn, conn.execute(query).all())

    def list_runs(self, *, requester: str | None = None, status: str | None = None, tool: str | None = None,
                  older_than: str | None = None, limit: int = 20) -> list[RunRecord]:
        """Recent runs, newest first, without their history (use `get_run` for one run's story)."""
        query = select(runs).order_by(runs.c.created_at.desc(), runs.c.run_id.desc()).limit(limit)
        if requester:
            query = query.where(runs.c.requester == requester)
        if status:
            query = query.where(runs.c.status == status)
        if tool:
            asked = select(approvals.c.key).where(approvals.c.run_id == runs.c.run_id, approvals.c.tool == tool)
            started = select(tool_executions.c.key).where(tool_executions.c.run_id == runs.c.run_id,
                                                          tool_executions.c.tool == tool)
            query = query.where(or_(asked.exists(), started.exists()))
        if older_than:
            made = select(runs.c.created_at).where(runs.c.run_id == older_than).scalar_subquery()
            query = query.where(or_(runs.c.created_at < made, and_(runs.c.created_at == made, runs.c.run_id < older_than)))
        with self.engine.connect() as conn:
            return [run_record(r, None, listing=True) for r in conn.execute(query).all()]

    def runs_by_id(self, run_ids: list[str]) -> dict[str, RunRecord]:
        """Several runs without their history, in one query."""
        if not run_ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(select(runs).where(runs.c.run_id.in_(set(run_ids)))).all()
        return {row.run_id: run_record(row, None, listing=True) for row in rows}

    def runs_needing_work(self, *, limit: int = 100) -> list[str]:
        """Runs no live worker holds that have something to do: orphaned, decided, or with a command."""
        decided = select(approvals.c.key).where(
            approvals.c.key == runs.c.pending_key,
            approvals.c.status.in_(DECIDED),
        ).exists()
        # Of a turn's several calls any may be approved first; an approval is never left unused.
        approved = select(approvals.c.key).where(approvals.c.run_id == runs.c.run_id,
                                                 approvals.c.status == "approved").exists()
        # A call handed to its caller that started and has no outcome, once the caller's lease lapsed.
        started = select(tool_executions.c.key).where(tool_executions.c.key == runs.c.pending_key,
                                                      tool_executions.c.status == "started").exists()
        with self.engine.connect() as conn:
            free = or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at < self._now(conn))
            query = select(runs.c.run_id).where(free, or_(
                runs.c.status.in_(ACTIVE),
                runs.c.command.is_not(None),
                and_(runs.c.status == "awaiting_approval", or_(decided, approved)),
                and_(runs.c.status.in_(WAITING_ON_CALLER), started),
            )).order_by(runs.c.updated_at).limit(limit)
            return list(conn.execute(query).scalars().all())

    def running_call(self, run_id: str) -> tuple[str, str] | None:
        """(tool, key) of the run's side effect that has started and has no recorded outcome yet."""
        with self.engine.connect() as conn:
            row = conn.execute(select(tool_executions.c.tool, tool_executions.c.key)
                               .where(tool_executions.c.run_id == run_id, tool_executions.c.status == "started")
                               .order_by(tool_executions.c.started_at.desc()).limit(1)).first()
        return (row.tool, row.key) if row else None

    def command_shown_at(self, run_id: str, version: int) -> tuple[dict[str, Any], datetime] | None:
        """The request a person made from a message showing the run at `version`, and when."""
        query = (select(events.c.payload, events.c.at)
                 .where(events.c.run_id == run_id, events.c.type == "command_recorded")
                 .order_by(events.c.seq.desc()).limit(COMMANDS_LOOKED_AT))
        with self.engine.connect() as conn:
            for payload, at in conn.execute(query).all():
                command = json.loads(payload)
                if command.get("shown_version") == version:
                    return command, at
        return None

    def timeline(self, run_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(events).where(events.c.run_id == run_id).order_by(events.c.seq)).all()
        return [{"seq": r.seq, "type": r.type, "at": r.at.isoformat(), **json.loads(r.payload)} for r in rows]

    def count_runs(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return dict(conn.execute(select(runs.c.status, func.count()).group_by(runs.c.status)).all())

    def receipt_of(self, *, approval_id: str | None = None, key: str | None = None) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            which = (receipts.c.approval_id == approval_id if approval_id is not None
                     else and_(receipts.c.key == key, receipts.c.approval_id.is_(None)))
            signed = conn.execute(select(receipts.c.receipt).where(which).order_by(receipts.c.id.desc()).limit(1)).scalar()
        return json.loads(signed) if signed is not None else None

    def proofs(self, run_id: str | None = None) -> list[Proof]:
        """Every receipt kept and every call the ledger says started (of one run, or all), from one
        snapshot: what `signoff audit verify --public-key` checks against each other."""
        used = (select(approvals.c.approval_id).where(approvals.c.key == tool_executions.c.key, approvals.c.status == "consumed")
                .limit(1).scalar_subquery())
        kept = select(receipts.c.receipt).order_by(receipts.c.id)
        ran = select(tool_executions.c.run_id, tool_executions.c.key, tool_executions.c.tool, tool_executions.c.digest, tool_executions.c.status,
                     used.label("approval_id")).order_by(tool_executions.c.started_at, tool_executions.c.key)
        if run_id is not None:
            kept, ran = kept.where(receipts.c.run_id == run_id), ran.where(tool_executions.c.run_id == run_id)
        with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ")
            found: list[Proof] = [ReceiptRow(json.loads(row.receipt)) for row in conn.execute(kept)]
            found += [ExecutionRow(run_id=row.run_id, key=row.key, tool=row.tool, digest=row.digest,
                                   status=row.status, approval_id=row.approval_id) for row in conn.execute(ran)]
        return found

    def audit_records(self, selection: Selection = WHOLE_LOG) -> Generator[Record, None, None]:
        """The audit log's chains as stored, in the order `audit_verify.verify` reads them, from one snapshot
        of the database: a write committed meanwhile is in all of them or in none. The events are
        streamed, a batch at a time."""
        with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":  # SQLite's read transaction is one snapshot already
                conn.execution_options(isolation_level="REPEATABLE READ")
            yield from _audit_runs(conn, selection.run_id)
            head = conn.execute(select(audit_head.c.links, audit_head.c.hash).where(audit_head.c.id == 1)).first()
            if head is not None:
                yield Head(links=head.links, hash=head.hash)
            for row in conn.execute(_audit_events(selection).execution_options(yield_per=1000)):
                yield EventRow(run_id=row.run_id, seq=row.seq, type=row.type, at=row.at, payload=row.payload,
                               prev=row.prev_hash, hash=row.hash)


def _audit_runs(conn: Connection, run_id: str | None) -> Iterator[RunRow | Seal]:
    """Each run's link (in the chain's order) with what its row records; the runs without a link;
    then the seals, in the chain's order."""
    links, rows = select(run_chain).order_by(run_chain.c.position), select(runs.c.run_id, runs.c.event_count)
    if run_id is not None:
        links, rows = links.where(run_chain.c.run_id == run_id), rows.where(runs.c.run_id == run_id)
    counts: dict[str, int] = {row.run_id: row.event_count for row in conn.execute(rows.order_by(runs.c.run_id))}
    seals = []
    for link in conn.execute(links):
        if link.seq == 1:
            yield RunRow(run_id=link.run_id, events=counts.pop(link.run_id, None),
                         link=Link(position=link.position, first=link.event_hash, prev=link.prev_hash, hash=link.hash))
        else:
            seals.append(Seal(run_id=link.run_id, position=link.position, seq=link.seq, last=link.event_hash,
                              prev=link.prev_hash, hash=link.hash))
    for run_id, count in counts.items():
        yield RunRow(run_id=run_id, link=None, events=count)
    yield from seals


def _audit_events(selection: Selection) -> Select[Any]:
    """The events selected, by run and `seq`: with `since`, each run's from its first at or after it."""
    query = select(events.c.run_id, events.c.seq, events.c.type, events.c.at, events.c.payload, events.c.prev_hash,
                   events.c.hash)
    if selection.run_id is not None:
        query = query.where(events.c.run_id == selection.run_id)
    if selection.since is not None:
        starts = (select(events.c.run_id, func.min(events.c.seq).label("seq"))
                  .where(events.c.at >= selection.since).group_by(events.c.run_id))
        if selection.run_id is not None:
            starts = starts.where(events.c.run_id == selection.run_id)
        start = starts.subquery()
        query = query.join(start, and_(start.c.run_id == events.c.run_id, events.c.seq >= start.c.seq))
    return query.order_by(events.c.run_id, events.c.seq)
