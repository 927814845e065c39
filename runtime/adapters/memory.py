"""The store in one process's memory: the contract of `ports.Store`, as the SQL store keeps it.

For tests, demos and programs that embed the runner without a database; nothing outlives the
process, and only its threads share it. One lock makes every method atomic and isolated, as a
SQL transaction is; each write checks everything first, so a refused write changes nothing.
Times come from `clock` (the wall clock by default), one clock for every lease and expiry.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from signoff.runtime.adapters.memory_approvals import MemoryApprovals, MemoryApprovalUnit
from signoff.runtime.adapters.memory_rows import (
    KeyInUse,
    Run,
    freeze,
    history_rows,
    next_link,
    thaw,
    without_history,
)
from signoff.runtime.agent import Checkpoint
from signoff.runtime.approval import LIVE, OPEN
from signoff.runtime.approval_commands import save_step_approvals
from signoff.runtime.audit import SEALED_WHEN, Seal
from signoff.runtime.errors import Conflict, IncompatibleState
from signoff.runtime.events import command_refused, run_created
from signoff.runtime.notices import Notice
from signoff.runtime.records import (
    ApprovalRecord,
    RunRecord,
    Saved,
)
from signoff.runtime.rules import (
    StepWrite,
    claimable,
)
from signoff.runtime.state import canonical_json

__all__ = ["KeyInUse", "MemoryStore"]



class MemoryStore(MemoryApprovals):
    """Runs, approvals, events and the execution ledger in this process, safe across its threads:
    the reads of `MemoryReads`, and the writes, each atomic."""

    def close(self) -> None:
        """Nothing is held open: the runs live as long as this object."""

    # -- runs ----------------------------------------------------------------------------

    def create_run(self, state: dict[str, Any], *, goal: str, requester: str, origin: dict[str, Any],
                   model: str, request_id: str | None = None, lease_to: str | None = None,
                   lease: timedelta | None = None, notices: tuple[Notice, ...] = ()) -> RunRecord:
        with self._lock:
            if request_id is not None and request_id in self._by_request:
                return self._runs[self._by_request[request_id]].record(history=False)
            if state["run_id"] in self._runs:
                raise KeyInUse(f"run {state['run_id']} exists already")
            now = self.now()
            run = Run(run_id=state["run_id"], goal=goal, requester=requester, origin=canonical_json(origin),
                      model=model, status=state["status"], state=without_history(state), version=1,
                      created_at=now, updated_at=now, added=next(self._added), request_id=request_id,
                      lease_owner=lease_to, lease_expires_at=now + lease if lease_to and lease else None)
            run.history.update(history_rows(0, state["history"]))
            run.append([run_created(goal, requester, origin, model)], now)
            self._owe(run.run_id, notices, now)
            self._link(run)
            self._runs[run.run_id] = run
            if request_id is not None:
                self._by_request[request_id] = run.run_id
            return run.record(history=True)

    def _link(self, run: Run) -> None:
        """Add the run's creation, or a seal of its events so far, to the chain of runs, as `rows.link_run` does."""
        link, self._audit_head = next_link(self._audit_head, run.run_id, run.events[-1].seq, run.events[-1].hash)
        if isinstance(link, Seal):
            self._seals.append(link)
        else:
            run.link = link

    def append_event(self, run_id: str, event: dict[str, Any]) -> None:
        with self._lock:
            self._run(run_id).append([event], self.now())

    def update_origin(self, run_id: str, origin: dict[str, Any]) -> None:
        with self._lock:
            if run_id in self._runs:
                self._runs[run_id].origin = canonical_json(origin)

    # -- leases --------------------------------------------------------------------------

    def claim(self, run_id: str, owner: str, lease: timedelta, *, history: bool = True) -> RunRecord | None:
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None or not claimable(run.status, run.command) or not (run.free(now) or run.lease_owner == owner):
                return None
            run.lease_owner, run.lease_expires_at = owner, now + lease
            try:
                return run.record(history=history)
            except IncompatibleState:
                self.release(run_id, owner)  # don't keep an unreadable run from other workers
                raise

    def hold(self, run_id: str, owner: str, lease: timedelta) -> bool:
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None or not run.free(now):
                return False
            run.lease_owner, run.lease_expires_at = owner, now + lease
            return True

    def renew(self, run_id: str, owner: str, lease: timedelta) -> bool:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.lease_owner != owner:
                return False
            run.lease_expires_at = self.now() + lease
            return True

    def release(self, run_id: str, owner: str, *, told: tuple[int, ...] = ()) -> None:
        with self._lock:
            self._drop_told(told)
            run = self._runs.get(run_id)
            if run is None or run.lease_owner != owner:
                return
            run.lease_owner = run.lease_expires_at = None

    # -- steps and requests ----------------------------------------------------------------

    def save_step(self, run_id: str, *, owner: str, version: int, checkpoint: Checkpoint, write: StepWrite,
                  lease: timedelta, clear_command: bool = False, release: bool = False,
                  told: tuple[int, ...] = ()) -> Saved:
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None or run.version != version or run.lease_owner != owner:
                raise Conflict(f"run {run_id} changed since version {version}; step not saved")
            self._check_step(run, checkpoint, write)
            state = checkpoint.state
            # Everything that can fail (encoding included) comes before the first change: a step
            # refused writes nothing, as a rolled-back transaction.
            state_text = without_history(state)
            history = history_rows(checkpoint.history_start, checkpoint.new_history)
            events = run.numbered(checkpoint.events, now)
            freeze(checkpoint.execution)
            unsealed = len(run.events)
            run.state, run.status = state_text, state["status"]
            run.pending_key = (state.get("pending") or {}).get("key")
            run.version, run.updated_at, run.lease_expires_at = version + 1, now, now + lease
            released = release and (clear_command or run.command is None)
            if released:
                run.lease_owner = run.lease_expires_at = None
            waiting = None if clear_command else thaw(run.command)
            if clear_command:
                run.command = None
            run.history.update(history)
            run.events.extend(events)
            if checkpoint.execution is not None:
                self._finish(checkpoint.execution, now)
            owed = self._step_notices(run_id, write.notices, told, now)
            opened, closed = self._step_approvals(run, write, now)
            if waiting is not None and write.refuse_waiting_command is not None:
                run.command = None
                run.append([command_refused(waiting, write.refuse_waiting_command)], now)
                waiting = None
            if len(run.events) > unsealed and run.status in SEALED_WHEN:
                self._link(run)
            return Saved(version + 1, opened, waiting, closed, released, owed)

    def _step_approvals(self, run: Run, write: StepWrite, now: datetime) -> tuple[tuple[ApprovalRecord, ...],
                                                                                  list[ApprovalRecord]]:
        """The step's approvals opened and closed (`save_step_approvals`), kept at once: the step's
        checks are made, and what is left cannot fail."""
        unit = MemoryApprovalUnit(self, now)
        found = save_step_approvals(unit, run.run_id, run.requester, write)
        for kept in unit.writes:
            kept()
        return found

    def _check_step(self, run: Run, checkpoint: Checkpoint, write: StepWrite) -> None:
        """What SQL's constraints would refuse: a history position taken, a second approval in force."""
        taken = set(run.history) & set(range(checkpoint.history_start,
                                              checkpoint.history_start + len(checkpoint.new_history)))
        if taken:
            raise KeyInUse(f"run {run.run_id} already has history at {sorted(taken)}")
        for request in write.approvals:
            if any(a.record.status in LIVE
                   and not (request.key in write.superseded and a.record.status in OPEN)
                   for a in self._by_key.get(request.key, [])):
                raise KeyInUse(f"an approval for {request.key} is in force already")

    def clear_command(self, run_id: str, event: dict[str, Any]) -> None:
        with self._lock:
            run = self._run(run_id)
            run.command = None
            run.append([event], self.now())

if TYPE_CHECKING:
    from signoff.runtime.ports import Store

    def _keeps_the_contract(store: MemoryStore) -> Store:
        return store  # mypy checks every method against the Protocol
