"""Row-level helpers of the store: each takes a connection, runs its statements and never commits.

The transaction belongs to the caller (a `SqlStore` method), as the SQLAlchemy docs put it:
sessions "separate and external".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Select,
    bindparam,
    case,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.engine import Row

from signoff.runtime.adapters.notice_rows import owe
from signoff.runtime.adapters.tables import (
    approval_votes,
    audit_head,
    events,
    run_chain,
    run_history,
    runs,
    tool_executions,
)
from signoff.runtime.audit import chain_hash, chained
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.events import run_created
from signoff.runtime.notices import Notice
from signoff.runtime.records import ApprovalRecord, GrantRecord, RunRecord, Vote
from signoff.runtime.schema import RunState
from signoff.runtime.state import canonical_json, parse_state, upgrade


def _bound(column: Column[Any]) -> Any:
    """A named placeholder typed like `column` (names must differ from the columns a statement sets)."""
    return bindparam(f"b_{column.name}", type_=column.type)


def _last_hash(appended: Any) -> ColumnElement[Any]:
    """In the RETURNING of an UPDATE that numbers `appended` more events on the run's row: the hash
    of the run's last event before them, the `prev` of the first (NULL if the run had none).

    On PostgreSQL a statement that had to wait for another writer's lock on the row sees the row as
    that writer committed it, but reads other tables as they were when it began: the other writer's
    events are not there yet, and the hash comes back NULL. `chain_start` then reads it again.
    """
    # Named in full: SQLite's RETURNING drops table names, and a bare `run_id` would be the event's.
    run_id = literal_column("runs.run_id", runs.c.run_id.type)
    count = literal_column("runs.event_count", runs.c.event_count.type)
    return (select(events.c.hash).where(events.c.run_id == run_id, events.c.seq == count - appended)
            .scalar_subquery().label("last_hash"))


# The statements of every step, built once: SQLAlchemy then finds their compiled form in its cache by
# a key it keeps on the object, instead of building and hashing a fresh statement per step.
_STEP_VALUES = {c.name: _bound(c) for c in (runs.c.state, runs.c.status, runs.c.history_len, runs.c.pending_key,
                                              runs.c.version, runs.c.updated_at, runs.c.lease_expires_at)}
_SAVE_STEP = (
    update(runs)
    .where(runs.c.run_id == bindparam("b_run_id"), runs.c.version == bindparam("b_expected_version"),
           runs.c.lease_owner == bindparam("b_lease_owner"))
    # The step's events are numbered by the same statement that saves it: one round trip less.
    .values(**_STEP_VALUES, event_count=runs.c.event_count + bindparam("b_new_events", type_=runs.c.event_count.type))
    # It also hands back the hash the step's events chain from: the row is held until commit.
    .returning(runs.c.command, runs.c.requester, runs.c.event_count,
               _last_hash(bindparam("b_new_events", type_=runs.c.event_count.type)), runs.c.lease_owner)
)
# Letting go of the lease with the step saves the worker a transaction of its own. A request left
# meanwhile (the command column, read in the same row lock) keeps the lease: the worker applies it next.
_KEEP_FOR_A_REQUEST = {
    "lease_owner": case((runs.c.command.is_(None), None), else_=runs.c.lease_owner),
    "lease_expires_at": case((runs.c.command.is_(None), None), else_=_STEP_VALUES["lease_expires_at"]),
}
SAVE_STEP = {
    (False, False): _SAVE_STEP,
    (True, False): _SAVE_STEP.values(command=None),
    (False, True): _SAVE_STEP.values(**_KEEP_FOR_A_REQUEST),
    # The request this step applied is the only one there can be (a new one waits for it to clear).
    (True, True): _SAVE_STEP.values(command=None, lease_owner=None, lease_expires_at=None),
}
"""The step's run-row update, by (whether it clears the command the step applied, whether it lets
go of the lease)."""

_NEW_EVENTS = bindparam("b_new_events", type_=runs.c.event_count.type)
_NUMBER_EVENTS = (update(runs).where(runs.c.run_id == bindparam("b_run_id"))
                  .values(event_count=runs.c.event_count + _NEW_EVENTS).returning(runs.c.event_count,
                                                                                 _last_hash(_NEW_EVENTS)))
"""Reserve the numbers of a run's next `b_new_events` events, handing back the hash to chain from."""
_INSERT_LINK = insert(run_chain)
_SET_AUDIT_HEAD = update(audit_head).where(audit_head.c.id == 1).values(hash=bindparam("b_hash"))
_INSERT_HISTORY = insert(run_history)
_INSERT_EVENTS = insert(events)
_TAKE_AUDIT_HEAD = (update(audit_head).where(audit_head.c.id == 1)
                    .values(links=audit_head.c.links + bindparam("b_links", type_=audit_head.c.links.type))
                    .returning(audit_head.c.links, audit_head.c.hash))
_INSERT_RUNS = insert(runs).returning(*runs.c, sort_by_parameter_order=True)
_FINISH_EXECUTION = update(tool_executions).where(tool_executions.c.key == bindparam("b_key")).values(
    {c: _bound(c) for c in (tool_executions.c.status, tool_executions.c.result, tool_executions.c.error,
                            tool_executions.c.finished_at, tool_executions.c.seconds)})


def step_params(run_id: str, owner: str, version: int, state: dict[str, Any], history_len: int, new_events: int,
                now: datetime, lease: timedelta) -> dict[str, Any]:
    """The parameters of `SAVE_STEP`: the run moves from `version` to `version + 1`."""
    return {
        "b_run_id": run_id, "b_expected_version": version, "b_lease_owner": owner,
        "b_state": dump_without_history(state), "b_status": state["status"], "b_history_len": history_len,
        "b_pending_key": (state.get("pending") or {}).get("key"), "b_version": version + 1,
        "b_updated_at": now, "b_lease_expires_at": now + lease, "b_new_events": new_events,
    }


def dump_without_history(state: dict[str, Any]) -> str:
    return canonical_json({k: v for k, v in state.items() if k != "history"})


def lock_runs(conn: Connection, query: Select[Any]) -> None:
    # Every writer takes a run's row before its approvals' rows (save_step updates the run first, and a
    # unit of work holds an approval's run before it loads the approval). Taking the approval first, as a click or a sweep would, deadlocks against a cancel
    # on PostgreSQL. SQLite has no row locks: its BEGIN IMMEDIATE already serialises writers.
    conn.execute(query.order_by(runs.c.run_id).with_for_update())


def append_history(conn: Connection, run_id: str, start: int, entries: list[dict[str, Any]]) -> None:
    if entries:
        conn.execute(_INSERT_HISTORY, [
            {"run_id": run_id, "seq": start + i, "entry": canonical_json(e)} for i, e in enumerate(entries)
        ])


def append_events(conn: Connection, run_id: str, new: list[dict[str, Any]], at: datetime) -> tuple[int, str] | None:
    """Append `new` to the run's events; returns the `seq` and hash of the last (None: `new` is empty)."""
    if not new:
        return None
    # Sequence numbers, and the hash to chain from, come from the run row, which also serialises
    # concurrent appenders.
    numbered = conn.execute(_NUMBER_EVENTS, {"b_run_id": run_id, "b_new_events": len(new)}).one()
    return insert_events(conn, run_id, new, numbered.event_count - len(new) + 1, at, numbered.last_hash)


def insert_events(conn: Connection, run_id: str, new: list[dict[str, Any]], first: int, at: datetime,
                  last_hash: str | None) -> tuple[int, str] | None:
    """Insert `new` numbered from `first`, chained after the run's last event; the caller has
    reserved those numbers on the run row and passes the hash that statement returned. Returns the
    `seq` and hash of the last event inserted (None: `new` is empty)."""
    if not new:
        return None
    rows = event_rows(run_id, new, first, at, chain_start(conn, run_id, first, last_hash))
    conn.execute(_INSERT_EVENTS, rows)
    return rows[-1]["seq"], rows[-1]["hash"]


def chain_start(conn: Connection, run_id: str, first: int, last_hash: str | None) -> str | None:
    """The hash event `first` follows: `last_hash` as the numbering UPDATE returned it, or, where
    that UPDATE waited for another writer (see `_last_hash`), read now that the writer committed."""
    if last_hash is not None or first == 1:
        return last_hash
    found: str | None = conn.execute(select(events.c.hash).where(events.c.run_id == run_id,
                                                                 events.c.seq == first - 1)).scalar()
    return found


def event_rows(run_id: str, new: list[dict[str, Any]], first: int, at: datetime,
               prev: str | None) -> list[dict[str, Any]]:
    """The `events` rows of `new`, numbered from `first` and chained after `prev` (None: the run's first)."""
    typed = [(e["type"], canonical_json({k: v for k, v in e.items() if k not in ("type", "run_id")})) for e in new]
    return [{"run_id": run_id, "seq": first + i, "type": kind, "at": at, "payload": payload, "prev_hash": before,
             "hash": digest}
            for i, ((kind, payload), (before, digest)) in enumerate(zip(typed, chained(run_id, first, prev, at, typed),
                                                                         strict=True))]


def append_one_event_each(conn: Connection, new: dict[str, dict[str, Any]], at: datetime) -> None:
    """One event for each of many runs, in two statements whatever their number (the expiry sweep)."""
    if not new:
        return
    numbered = conn.execute(update(runs).where(runs.c.run_id.in_(list(new)))
                            .values(event_count=runs.c.event_count + 1)
                            .returning(runs.c.run_id, runs.c.event_count, _last_hash(1))).all()
    conn.execute(_INSERT_EVENTS, [row for run_id, seq, last_hash in numbered for row in event_rows(
        run_id, [new[run_id]], seq, at, chain_start(conn, run_id, seq, last_hash))])


@dataclass(frozen=True)
class NewRun:
    """A run to create (`RunStore.create_run`'s arguments)."""

    state: dict[str, Any]
    goal: str
    requester: str
    origin: dict[str, Any]
    model: str
    request_id: str | None
    lease_to: str | None
    lease: timedelta | None
    notices: tuple[Notice, ...] = ()
    """What the run owes people from the start (its run message: `notices.Announce`)."""


def insert_new_runs(conn: Connection, batch: Sequence[NewRun], now: datetime) -> list[tuple[RunRecord, str]]:
    """Insert `batch`, in order: each run's row, its `run_created` event and its history, in three
    statements however many runs; each run, and the hash of its first event, which the caller links
    into the chain of runs (`link_runs`), last."""
    made = [(new, event_rows(new.state["run_id"], [
        run_created(new.goal, new.requester, new.origin, new.model)], 1, now, None)) for new in batch]
    rows = conn.execute(_INSERT_RUNS, [dict(
        run_id=new.state["run_id"], goal=new.goal, requester=new.requester, origin=canonical_json(new.origin),
        model=new.model, status=new.state["status"], state=dump_without_history(new.state), history_len=0,
        version=1, created_at=now, updated_at=now, request_id=new.request_id, lease_owner=new.lease_to,
        lease_expires_at=now + new.lease if new.lease_to and new.lease else None, event_count=1,
    ) for new in batch]).all()
    conn.execute(_INSERT_EVENTS, [row for _, created in made for row in created])
    history = [{"run_id": new.state["run_id"], "seq": i, "entry": canonical_json(entry)}
               for new in batch for i, entry in enumerate(new.state["history"])]
    if history:
        conn.execute(_INSERT_HISTORY, history)
    owe(conn, ((new.state["run_id"], notice) for new in batch for notice in new.notices), now)
    return [(run_record(row, list(new.state["history"])), created[0]["hash"])
            for row, (new, created) in zip(rows, made, strict=True)]


def link_run(conn: Connection, run_id: str, seq: int, event: str) -> None:
    """Add a link to the chain of runs: the run's creation (`seq` 1, its first event hashing to
    `event`), or a seal of its events up to `seq`, the last hashing to `event`.

    Creating a run, and a step that leaves one waiting or ended (`audit.SEALED_WHEN`), are the only
    writes that take the head row, and they take it last: they wait for each other here (until
    the holder commits), no other write ever does, and the holder waits for nothing more, so no
    deadlock can form around it.
    """
    link_runs(conn, [(run_id, seq, event)])


def link_runs(conn: Connection, links: Sequence[tuple[str, int, str]]) -> None:
    """`link_run` for each of `links` (run id, seq, event hash), in order, taking the head row once."""
    head = conn.execute(_TAKE_AUDIT_HEAD, {"b_links": len(links)}).first()
    if head is None:
        raise IncompatibleState("the audit log's head row (table audit_head) is gone; `signoff audit verify` "
                                "says what else is")
    position, prev, rows = head.links - len(links), head.hash, []
    for run_id, seq, event in links:
        position += 1
        digest = chain_hash(position, run_id, seq, event, prev)
        rows.append({"position": position, "run_id": run_id, "seq": seq, "event_hash": event, "prev_hash": prev,
                     "hash": digest})
        prev = digest
    conn.execute(_INSERT_LINK, rows)
    conn.execute(_SET_AUDIT_HEAD, {"b_hash": prev})


def finish_execution(conn: Connection, execution: dict[str, Any], now: datetime) -> None:
    ok = execution["ok"]
    conn.execute(_FINISH_EXECUTION, {
        "b_key": execution["key"], "b_status": "succeeded" if ok else "failed",
        "b_result": canonical_json(execution.get("result")) if ok else None,
        "b_error": None if ok else str(execution.get("error")),
        "b_finished_at": now, "b_seconds": execution.get("seconds"),
    })


def with_votes(conn: Connection, rows: Sequence[Row[Any]]) -> list[ApprovalRecord]:
    """The approvals in `rows` with their votes: read in one query, and only for the approvals that
    needed more than one (a single decision is the approval's own `decided_by`)."""
    several = [row.approval_id for row in rows if row.quorum > 1]
    votes: dict[str, list[Vote]] = {}
    if several:
        for vote in conn.execute(select(approval_votes).where(approval_votes.c.approval_id.in_(several))
                                 .order_by(approval_votes.c.approval_id, approval_votes.c.seq)).all():
            votes.setdefault(vote.approval_id, []).append(
                Vote(user=vote.user_id, approved=vote.approved, at=vote.at, note=vote.note))
    return [approval_record(row, tuple(votes.get(row.approval_id, ())) if row.quorum > 1 else None) for row in rows]


def loads(text: str | None) -> Any:
    return json.loads(text) if text else None


def run_record(row: Row[Any], history: list[dict[str, Any]] | None, *, listing: bool = False) -> RunRecord:
    """The run in `row`; an unreadable state raises `IncompatibleState`, or, when `listing`, gives a
    record marked `unreadable` so that one damaged run cannot hide every other run in a list."""
    try:
        state = json.loads(row.state)
        if not isinstance(state, dict):
            raise json.JSONDecodeError("not a JSON object", row.state, 0)
    except json.JSONDecodeError as exc:
        problem = f"run {row.run_id}: stored state is not valid JSON ({exc})"
        if not listing:
            raise IncompatibleState(problem) from None
        return _record(row, {}, lenient=True, unreadable=problem)
    state = upgrade(state, lenient=True)  # an older version's row reads as today's; a listing keeps the rest
    state["history"] = history if history is not None else []
    checked = None
    if history is not None:
        checked, state = parse_state(state, fresh=True)  # just parsed: no need for parse_state's copy
    return _record(row, state, lenient=listing, checked=checked)


def _record(row: Row[Any], state: dict[str, Any], *, lenient: bool, unreadable: str | None = None,
            checked: RunState | None = None) -> RunRecord:
    read = json_or if lenient else _json_strict
    return RunRecord(
        run_id=row.run_id, goal=row.goal, requester=row.requester, origin=read(row.origin, {}),
        model=row.model, status=row.status, state=state, version=row.version, created_at=row.created_at,
        updated_at=row.updated_at, lease_owner=row.lease_owner, lease_expires_at=row.lease_expires_at,
        command=read(row.command, None), request_id=row.request_id,
        unreadable=unreadable, checked=checked,
    )


def _json_strict(text: str | None, default: Any) -> Any:
    return json.loads(text) if text else default


def json_or(text: str | None, default: Any) -> Any:
    """A small JSON column (origin, command); damaged, it reads as `default` rather than hiding the run."""
    try:
        return json.loads(text) if text else default
    except json.JSONDecodeError:
        return default


def grant_record(row: Row[Any]) -> GrantRecord:
    return GrantRecord(**{**dict(row._mapping), "same": json.loads(row.same)})


def approval_record(row: Row[Any], votes: tuple[Vote, ...] | None = None) -> ApprovalRecord:
    """The approval in `row`; without `votes`, those an approval of quorum 1 implies (its one decision)."""
    data = dict(row._mapping)
    data["args"] = json.loads(data["args"])
    data["message"] = loads(data["message"])
    data["asked"] = loads(data["asked"])
    data["asked_with"] = loads(data["asked_with"])
    for name in ("glass", "glass_review", "glass_message"):
        data[name] = loads(data[name])
    if votes is None:
        decided = data["decided_by"] is not None and data["status"] in ("approved", "consumed", "denied")
        votes = (Vote(user=data["decided_by"], approved=data["status"] != "denied", at=data["decided_at"],
                      note=data["note"]),) if decided else ()
    return ApprovalRecord(**data, votes=votes)
