"""The reads of `MemoryStore`: what is kept per run, approval and ledger row, looked up under its lock.

`MemoryStore` adds the writes; each read sees the store between two writes, never in the middle
of one, as a read of the SQL store sees only committed transactions.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable, Generator
from datetime import UTC, datetime
from typing import Any

from signoff.runtime.adapters.memory_rows import Approval, Execution, Run, thaw
from signoff.runtime.approval import DECIDED
from signoff.runtime.audit import GENESIS, WHOLE_LOG, EventRow, Head, Record, RunRow, Seal, Selection
from signoff.runtime.errors import NotFound
from signoff.runtime.receipt_check import ExecutionRow, Proof, ReceiptRow
from signoff.runtime.records import ApprovalRecord, GrantRecord, RunRecord
from signoff.runtime.rules import COMMANDS_LOOKED_AT
from signoff.runtime.schema import ACTIVE, WAITING_ON_CALLER


class MemoryReads:
    """Runs, approvals, events and executions as kept, read one consistent moment at a time."""

    def __init__(self, *, clock: Callable[[], datetime] | None = None) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        self._runs: dict[str, Run] = {}
        self._by_request: dict[str, str] = {}
        self._approvals: dict[str, Approval] = {}
        self._by_key: dict[str, list[Approval]] = {}
        self._executions: dict[str, Execution] = {}
        self._grants: dict[str, GrantRecord] = {}
        self._receipts: list[dict[str, Any]] = []
        self._added = itertools.count()
        self._audit_head = Head(links=0, hash=GENESIS)
        self._seals: list[Seal] = []
        """The chain of runs' links after each run's first, in the order they were made."""

    def now(self) -> datetime:
        return self.clock() if self.clock is not None else datetime.now(UTC)

    def live_grants(self, run_id: str, requester: str) -> list[GrantRecord]:
        with self._lock:
            now = self.now()
            return [g for g in sorted(self._grants.values(), key=lambda g: g.created_at)
                    if g.revoked_at is None and g.expires_at > now
                    and (g.run_id == run_id if g.scope == "run" else g.requester == requester)]

    def list_grants(self, *, live: bool = True, limit: int = 50, run_id: str | None = None) -> list[GrantRecord]:
        with self._lock:
            now = self.now()
            found = [g for g in self._grants.values() if (run_id is None or g.run_id == run_id)
                     and (not live or (g.revoked_at is None and g.expires_at > now))]
            return sorted(found, key=lambda g: g.created_at, reverse=True)[:limit]

    def get_grant(self, grant_id: str) -> GrantRecord | None:
        with self._lock:
            return self._grants.get(grant_id)

    def get_run(self, run_id: str, *, history: bool = True) -> RunRecord | None:
        with self._lock:
            run = self._runs.get(run_id)
            return run.record(history=history) if run is not None else None

    def run_for_request(self, request_id: str | None) -> RunRecord | None:
        with self._lock:
            run_id = self._by_request.get(request_id) if request_id is not None else None
            return self._runs[run_id].record(history=False) if run_id is not None else None

    def list_runs(self, *, requester: str | None = None, status: str | None = None, tool: str | None = None,
                  older_than: str | None = None, limit: int = 20) -> list[RunRecord]:
        with self._lock:
            used = ({a.record.run_id for a in self._approvals.values() if a.record.tool == tool}
                    | {e.run_id for e in self._executions.values() if e.tool == tool}) if tool else set()
            after = self._runs.get(older_than) if older_than else None
            chosen = [r for r in self._runs.values()
                      if (not requester or r.requester == requester) and (not status or r.status == status)
                      and (not tool or r.run_id in used) and (not older_than or (
                          after is not None and (r.created_at, r.run_id) < (after.created_at, after.run_id)))]
            chosen.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
            return [r.record(history=False) for r in chosen[:limit]]

    def runs_by_id(self, run_ids: list[str]) -> dict[str, RunRecord]:
        with self._lock:
            return {i: self._runs[i].record(history=False) for i in set(run_ids) if i in self._runs}

    def count_runs(self) -> dict[str, int]:
        with self._lock:
            return dict(Counter(r.status for r in self._runs.values()))

    def timeline(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            run = self._runs.get(run_id)
            return [{"seq": e.seq, "type": e.type, "at": e.at.isoformat(), **thaw(e.payload)}
                    for e in (run.events if run is not None else [])]

    def receipt_of(self, *, approval_id: str | None = None, key: str | None = None) -> dict[str, Any] | None:
        with self._lock:
            return next((r for r in reversed(self._receipts) if r["receipt"]["approval_id"] == approval_id
                         and (approval_id is not None or r["receipt"]["key"] == key)), None)

    def proofs(self, run_id: str | None = None) -> list[Proof]:
        with self._lock:
            found: list[Proof] = [ReceiptRow(r) for r in self._receipts if run_id in (None, r["receipt"]["run_id"])]
            for e in sorted(self._executions.values(), key=lambda e: e.added):
                if run_id in (None, e.run_id):
                    used = next((a.record.approval_id for a in self._by_key.get(e.key, [])
                                 if a.record.status == "consumed"), None)
                    found.append(ExecutionRow(run_id=e.run_id, key=e.key, tool=e.tool, digest=e.digest,
                                              status=e.status, approval_id=used))
        return found

    def audit_records(self, selection: Selection = WHOLE_LOG) -> Generator[Record, None, None]:
        """The audit log's chains as kept, in the order `audit_verify.verify` reads them, at one moment."""
        with self._lock:
            chosen = sorted((r for r in self._runs.values() if selection.run_id in (None, r.run_id)),
                            key=lambda r: r.link.position if r.link is not None else 0)
            records: list[Record] = [RunRow(run_id=r.run_id, link=r.link, events=len(r.events)) for r in chosen]
            records += [seal for seal in self._seals if selection.run_id in (None, seal.run_id)]
            records.append(self._audit_head)
            for run in sorted(chosen, key=lambda r: r.run_id):
                since = selection.since
                start = next((e.seq for e in run.events if since is None or e.at >= since), len(run.events) + 1)
                records += [EventRow(run_id=run.run_id, seq=e.seq, type=e.type, at=e.at, payload=e.payload,
                                     prev=e.prev, hash=e.hash) for e in run.events[start - 1:]]
        yield from records

    def _run(self, run_id: str) -> Run:
        if run_id not in self._runs:
            raise NotFound(f"no run {run_id}")
        return self._runs[run_id]

    def command_shown_at(self, run_id: str, version: int) -> tuple[dict[str, Any], datetime] | None:
        with self._lock:
            run = self._runs.get(run_id)
            made = [e for e in (run.events if run is not None else []) if e.type == "command_recorded"]
            for event in reversed(made[-COMMANDS_LOOKED_AT:]):
                command = thaw(event.payload)
                if command.get("shown_version") == version:
                    return command, event.at
            return None

    def runs_needing_work(self, *, limit: int = 100) -> list[str]:
        with self._lock:
            now = self.now()
            chosen = [r for r in self._runs.values() if r.free(now) and (
                r.status in ACTIVE or r.command is not None
                or (r.status == "awaiting_approval" and (self._decided(r.pending_key) or any(
                    a.record.run_id == r.run_id and a.record.status == "approved" for a in self._approvals.values())))
                or (r.status in WAITING_ON_CALLER and r.pending_key is not None and any(
                    x.key == r.pending_key and x.status == "started" for x in self._executions.values())))]
            return [r.run_id for r in oldest_first(chosen, "updated_at")[:limit]]

    def _decided(self, key: str | None) -> bool:
        return key is not None and any(a.record.status in DECIDED for a in self._by_key.get(key, []))

    def executions(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = [x for x in self._executions.values() if x.run_id == run_id]
            return [x.row() for x in oldest_first(rows, "started_at")]

    def running_call(self, run_id: str) -> tuple[str, str] | None:
        with self._lock:
            started = [x for x in self._executions.values() if x.run_id == run_id and x.status == "started"]
            latest = newest_first(started, "started_at")
            return (latest[0].tool, latest[0].key) if latest else None

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        with self._lock:
            approval = self._approvals.get(approval_id)
            return approval.out() if approval is not None else None

    def approval_for_key(self, key: str) -> ApprovalRecord | None:
        with self._lock:
            chosen = self._by_key.get(key, [])
            in_force = [a for a in chosen if a.record.status != "superseded"]
            latest = newest_first(in_force or chosen, "requested_at")
            return latest[0].out() if latest else None

    def list_approvals(self, *, status: str | None = None, run_id: str | None = None,
                       exclude_requester: str | None = None, limit: int = 50) -> list[ApprovalRecord]:
        with self._lock:
            chosen = [a for a in self._approvals.values() if _matches(
                a.record, status=status, run_id=run_id, exclude_requester=exclude_requester)]
            return [a.out() for a in newest_first(chosen, "requested_at")[:limit]]


def _matches(record: ApprovalRecord, *, status: str | None, run_id: str | None, exclude_requester: str | None) -> bool:
    return ((not status or record.status == status) and (not run_id or record.run_id == run_id)
            and (not exclude_requester or record.requester != exclude_requester))


def oldest_first(rows: list[Any], time: str) -> list[Any]:
    """By a time column, and by insertion order where times are equal."""
    return sorted(rows, key=lambda row: (_time(row, time), row.added))


def newest_first(rows: list[Any], time: str) -> list[Any]:
    return oldest_first(rows, time)[::-1]


def _time(row: Any, name: str) -> datetime:
    value: datetime = getattr(row.record if isinstance(row, Approval) else row, name)
    return value


