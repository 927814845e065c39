"""The durable store on SQLAlchemy 2.0 (with its reads in `reads.py`, approvals as rows in
`approval_rows.py` and row helpers in `rows.py`).

Every write is one transaction that takes the run's row first, so writers on any replica follow
one another run by run; an approval is loaded, handed to a transition of `runtime/approval.py`,
and the change saved as a compare-and-set (`UPDATE ... WHERE status = ...`), so exactly one of any
number of concurrent deciders wins, on SQLite and on PostgreSQL alike. What a write does beyond
its own rows comes from `runtime/rules.py` as data: the store decides no rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError

from signoff.runtime.adapters.group_commit import GroupCommit
from signoff.runtime.adapters.notice_rows import drop_told, due_of_run, owe
from signoff.runtime.adapters.rows import (
    SAVE_STEP,
    NewRun,
    append_events,
    append_history,
    finish_execution,
    insert_events,
    insert_new_runs,
    link_run,
    link_runs,
    step_params,
)
from signoff.runtime.adapters.sql_approval_unit import SqlApprovalUnit
from signoff.runtime.adapters.sql_approvals import SqlApprovals
from signoff.runtime.adapters.sql_notices import SqlNotices
from signoff.runtime.adapters.statements import (
    CLAIM,
    HOLD,
    RELEASE,
    RENEW,
    lease_params,
)
from signoff.runtime.adapters.tables import runs
from signoff.runtime.agent import Checkpoint
from signoff.runtime.approval_commands import save_step_approvals
from signoff.runtime.audit import SEALED_WHEN
from signoff.runtime.errors import Conflict, IncompatibleState
from signoff.runtime.events import command_refused
from signoff.runtime.notices import AT_ONCE, Notice
from signoff.runtime.records import (
    RunRecord,
    Saved,
)
from signoff.runtime.rules import (
    StepWrite,
)
from signoff.runtime.state import canonical_json


class SqlStore(SqlApprovals, SqlNotices):
    """Runs, approvals, events and the execution ledger in one SQL database: the reads of
    `SqlReads`, the approvals' and the ledger's writes of `SqlApprovals`, and the runs' writes, each
    one transaction."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(engine, clock=clock)
        self._new_runs: GroupCommit[NewRun, RunRecord | str] = GroupCommit(self._insert_runs)
        """New runs that arrive together are inserted in one transaction (`group_commit`)."""

    # -- runs ----------------------------------------------------------------------------

    def create_run(self, state: dict[str, Any], *, goal: str, requester: str, origin: dict[str, Any],
                   model: str, request_id: str | None = None, lease_to: str | None = None,
                   lease: timedelta | None = None, notices: tuple[Notice, ...] = ()) -> RunRecord:
        """Insert a new run, owing `notices`; with a `request_id` already used, return that request's run instead."""
        created = self._new_runs.submit(NewRun(state, goal, requester, origin, model, request_id, lease_to, lease,
                                               notices))
        if isinstance(created, RunRecord):
            return created
        earlier = self.run_for_request(created)
        if earlier is None:
            raise IncompatibleState(f"request {created} started a run that cannot be read back")
        return earlier

    def _insert_runs(self, batch: Sequence[NewRun]) -> list[RunRecord | str]:
        """Insert `batch` in one transaction: each new run, or the request id whose run exists already.
        A request id taken meanwhile by another replica fails the transaction: each is then
        inserted alone, so that one replay does not fail the runs beside it."""
        # Inserted by request id, and linked into the chain of runs after every insert: two replicas'
        # batches then wait for each other's request ids in one order, and take the chain's head
        # last, as a single creation does, so no deadlock can form between them.
        order = sorted(range(len(batch)), key=lambda i: (batch[i].request_id is None, batch[i].request_id or ""))
        try:
            with self._tx() as conn:
                asked = [new.request_id for new in batch if new.request_id]
                taken = set(conn.execute(select(runs.c.request_id).where(runs.c.request_id.in_(asked))).scalars()
                            ) if asked else set()
                made, fresh = dict[int, RunRecord | str](), []
                for index in order:
                    request_id = batch[index].request_id
                    if request_id is not None and request_id in taken:
                        made[index] = request_id
                        continue
                    fresh.append(index)
                    if request_id:
                        taken.add(request_id)
                inserted = insert_new_runs(conn, [batch[index] for index in fresh], self._now(conn)) if fresh else []
                for index, (run, _) in zip(fresh, inserted, strict=True):
                    made[index] = run
                if inserted:
                    link_runs(conn, [(run.run_id, 1, first) for run, first in inserted])
                return [made[index] for index in range(len(batch))]
        except IntegrityError as exc:
            if len(batch) > 1:
                return [made for new in batch for made in self._insert_runs([new])]
            if batch[0].request_id:
                return [batch[0].request_id]  # taken meanwhile: that request's run is the answer
            raise exc

    def claim(self, run_id: str, owner: str, lease: timedelta, *, history: bool = True) -> RunRecord | None:
        """Take the run's lease if nobody holds a live one; None if somebody does or the run ended."""
        with self._tx() as conn:
            now = self._now(conn)
            claimed = conn.execute(CLAIM, lease_params(run_id, owner, now, lease)).rowcount
        if claimed != 1:
            return None
        try:
            return self.get_run(run_id, history=history)
        except IncompatibleState:
            # Unreadable here (corrupted, or written by a newer Signoff): don't keep it from other workers.
            self.release(run_id, owner)
            raise

    def hold(self, run_id: str, owner: str, lease: timedelta) -> bool:
        """Take the run's lease for a short errand, whatever the run's status (recovery re-posting a
        message); False if someone holds a live lease."""
        with self._tx() as conn:
            return conn.execute(HOLD, lease_params(run_id, owner, self._now(conn), lease)).rowcount == 1

    def renew(self, run_id: str, owner: str, lease: timedelta) -> bool:
        with self._tx() as conn:
            return conn.execute(RENEW, lease_params(run_id, owner, self._now(conn), lease)).rowcount == 1

    def release(self, run_id: str, owner: str, *, told: tuple[int, ...] = ()) -> None:
        with self._tx() as conn:
            conn.execute(RELEASE, {"b_run_id": run_id, "b_owner": owner})
            drop_told(conn, told)

    def save_step(self, run_id: str, *, owner: str, version: int, checkpoint: Checkpoint, write: StepWrite,
                  lease: timedelta, clear_command: bool = False, release: bool = False,
                  told: tuple[int, ...] = ()) -> Saved:
        """Commit one step: state, new history, its events, the ledger outcome and `write` applied.

        Raises `Conflict` (writing nothing) if the run changed since `version` or the lease was lost.
        """
        state = checkpoint.state
        with self._tx() as conn:
            now = self._now(conn)
            params = step_params(run_id, owner, version, state, len(state["history"]), len(checkpoint.events),
                                 now, lease)
            row = conn.execute(SAVE_STEP[clear_command, release], params).first()
            if row is None:
                raise Conflict(f"run {run_id} changed since version {version}; step not saved")
            append_history(conn, run_id, checkpoint.history_start, checkpoint.new_history)
            last = insert_events(conn, run_id, checkpoint.events, row.event_count - len(checkpoint.events) + 1, now,
                                 row.last_hash)
            if checkpoint.execution is not None:
                finish_execution(conn, checkpoint.execution, now)
            owe(conn, ((run_id, notice) for notice in write.notices), now)
            drop_told(conn, told)
            owed = tuple(due_of_run(conn, run_id, now, AT_ONCE)) if write.notices else None
            opened, closed = save_step_approvals(SqlApprovalUnit(conn, now), run_id, row.requester, write)
            command = json.loads(row.command) if row.command and not clear_command else None
            if command is not None and write.refuse_waiting_command is not None:
                conn.execute(update(runs).where(runs.c.run_id == run_id).values(command=None))
                last = append_events(conn, run_id, [command_refused(command, write.refuse_waiting_command)], now)
                command = None
            if last is not None and state["status"] in SEALED_WHEN:  # last: it takes the head row
                link_run(conn, run_id, *last)
        return Saved(version + 1, opened, command, closed, released=row.lease_owner is None, owed=owed)

    def clear_command(self, run_id: str, event: dict[str, Any]) -> None:
        """Drop a command that could not be applied, and say why in the audit log."""
        with self._tx() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(command=None))
            append_events(conn, run_id, [event], self._now(conn))

    def update_origin(self, run_id: str, origin: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(origin=canonical_json(origin)))

    def append_event(self, run_id: str, event: dict[str, Any]) -> None:
        with self._tx() as conn:
            append_events(conn, run_id, [event], self._now(conn))


if TYPE_CHECKING:
    from signoff.runtime.ports import Store

    def _keeps_the_contract(store: SqlStore) -> Store:
        return store  # mypy checks every method against the Protocol
