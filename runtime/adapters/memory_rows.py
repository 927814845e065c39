"""What `MemoryStore` keeps per run, approval and ledger row, and how it hands them out.

Values are kept as the JSON text the SQL store would write and read back per call, so a caller's
dict is never the store's and what comes out is what SQL would give (tuples as lists, keys as
strings). No I/O library: this adapter runs wherever the core does.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from signoff.runtime.audit import Head, Link, Seal, chain_hash, chained
from signoff.runtime.errors import SignoffError
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.state import canonical_json, json_copy, parse_state


class KeyInUse(SignoffError):
    """A write would repeat what must be unique (a run id, a history position, a second approval in
    force for one call): what a SQL unique constraint refuses. Nothing was written."""


@dataclass(frozen=True)
class Event:
    seq: int
    type: str
    payload: str
    at: datetime
    prev: str
    hash: str
    """Chained to `prev`, the run's event before it, as `runtime/audit.py` defines."""


@dataclass
class Run:
    """A run's row: its state without history, which is kept by position as SQL keeps it by `seq`."""

    run_id: str
    goal: str
    requester: str
    origin: str
    model: str
    status: str
    state: str
    version: int
    created_at: datetime
    updated_at: datetime
    added: int
    """Insertion order, which breaks ties between equal times."""
    history: dict[int, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    pending_key: str | None = None
    command: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    request_id: str | None = None
    link: Link | None = None
    """The run's place in the chain of runs."""

    def free(self, now: datetime) -> bool:
        """No live lease holds the run."""
        return self.lease_owner is None or (self.lease_expires_at is not None and self.lease_expires_at < now)

    def append(self, new: list[dict[str, Any]], at: datetime) -> None:
        self.events.extend(self.numbered(new, at))

    def numbered(self, new: list[dict[str, Any]], at: datetime) -> list[Event]:
        """Audit events, numbered and chained after the last (the payload without its type, as SQL
        stores it), not yet appended: encoding can fail, and a failed write must change nothing."""
        typed = [(event["type"], canonical_json({k: v for k, v in event.items() if k not in ("type", "run_id")}))
                 for event in new]
        first = len(self.events) + 1
        links = chained(self.run_id, first, self.events[-1].hash if self.events else None, at, typed)
        return [Event(first + i, kind, payload, at, prev, digest)
                for i, ((kind, payload), (prev, digest)) in enumerate(zip(typed, links, strict=True))]

    def record(self, *, history: bool) -> RunRecord:
        """The run as the SQL store reads it: the state checked when it comes with its history."""
        state = json.loads(self.state)
        state["history"] = [json.loads(self.history[seq]) for seq in sorted(self.history)] if history else []
        checked = None
        if history:
            checked, state = parse_state(state, fresh=True)
        return RunRecord(
            run_id=self.run_id, goal=self.goal, requester=self.requester, origin=json.loads(self.origin),
            model=self.model, status=self.status, state=state, version=self.version, created_at=self.created_at,
            updated_at=self.updated_at, lease_owner=self.lease_owner, lease_expires_at=self.lease_expires_at,
            command=thaw(self.command), request_id=self.request_id,
            checked=checked,
        )


@dataclass
class Approval:
    """An approval as kept: the record with its JSON-shaped fields as text."""

    record: ApprovalRecord
    added: int

    def out(self) -> ApprovalRecord:
        """A copy for the caller."""
        return dataclasses.replace(self.record, args=json_copy(self.record.args),
                                   message=json_copy(self.record.message), asked=json_copy(self.record.asked),
                                   asked_with=json_copy(self.record.asked_with))

    def change(self, **values: Any) -> ApprovalRecord:
        self.record = dataclasses.replace(self.record, **values)
        return self.out()


@dataclass
class Execution:
    """A ledger row."""

    key: str
    run_id: str
    tool: str
    digest: str
    status: str
    attempts: int
    started_at: datetime
    added: int
    result: str | None = None
    error: str | None = None
    finished_at: datetime | None = None
    seconds: float | None = None

    def row(self) -> dict[str, Any]:
        """The row as the SQL store lists it, its result read back."""
        return {"key": self.key, "run_id": self.run_id, "tool": self.tool, "digest": self.digest,
                "status": self.status, "result": thaw(self.result), "error": self.error, "attempts": self.attempts,
                "started_at": self.started_at, "finished_at": self.finished_at, "seconds": self.seconds}

    def finish(self, execution: dict[str, Any], now: datetime) -> None:
        ok = execution["ok"]
        self.status = "succeeded" if ok else "failed"
        self.result = canonical_json(execution.get("result")) if ok else None
        self.error = None if ok else str(execution.get("error"))
        self.finished_at, self.seconds = now, execution.get("seconds")


def next_link(head: Head, run_id: str, seq: int, event: str) -> tuple[Link | Seal, Head]:
    """The link after `head` in the chain of runs, as `rows.link_run` writes it (the run's creation
    at `seq` 1, a seal after), and the head that ends in it."""
    position = head.links + 1
    digest = chain_hash(position, run_id, seq, event, head.hash)
    link = (Link(position=position, first=event, prev=head.hash, hash=digest) if seq == 1
            else Seal(run_id=run_id, position=position, seq=seq, last=event, prev=head.hash, hash=digest))
    return link, Head(links=position, hash=digest)


def freeze(value: Any) -> str | None:
    return None if value is None else canonical_json(value)


def thaw(text: str | None) -> Any:
    return json.loads(text) if text else None


def without_history(state: dict[str, Any]) -> str:
    return canonical_json({k: v for k, v in state.items() if k != "history"})


def history_rows(start: int, entries: list[dict[str, Any]]) -> dict[int, str]:
    """History entries by position, as `Run.history` keeps them."""
    return {start + i: canonical_json(e) for i, e in enumerate(entries)}
