"""What the runner needs from the world, as Protocols: fakes and adapters need not inherit anything.

`Store` keeps runs, approvals and the execution ledger (`adapters/sql.py` on SQLite or PostgreSQL,
`adapters/memory.py` in one process). Every store method that writes is atomic: it happens whole
or not at all, and concurrent callers, threads or replicas, see it so. Times (leases, expiries,
`requested_at`) are the store's clock, one clock for every replica. A store decides no rule: what
happens to an approval is a transition of `runtime/approval.py`, which a command of
`approval_commands.py` asks in a unit of work the store opens (`approval_unit.py`: the store loads,
locks and saves, the command decides), and what a step or a request does besides
comes from `runtime/rules.py` as data. Who is told, and who watches: `telling_ports.py`.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime, timedelta
from typing import Any, Protocol

from signoff.runtime.agent import Checkpoint
from signoff.runtime.approval_unit import ApprovalUnits
from signoff.runtime.audit import WHOLE_LOG, Record, Selection
from signoff.runtime.notices import HeldNotice, Notice
from signoff.runtime.receipt_check import Proof
from signoff.runtime.records import (
    ApprovalRecord,
    GrantRecord,
    RunRecord,
    Saved,
)
from signoff.runtime.rules import StepWrite


class RunStore(Protocol):
    """Runs: their state and appended history, the audit log, leases and people's requests.

    A run's `version` moves on with every step saved (and with a used-up retry request); a step is
    saved only by the lease holder and only from the version it read (optimistic concurrency).
    """

    def now(self) -> datetime:
        """The store's time now: what every lease and expiry is measured by."""

    def create_run(self, state: dict[str, Any], *, goal: str, requester: str, origin: dict[str, Any],
                   model: str, request_id: str | None = None, lease_to: str | None = None,
                   lease: timedelta | None = None, notices: tuple[Notice, ...] = ()) -> RunRecord:
        """Record a new run at version 1 with its history, a `run_created` event and the `notices`
        it owes people, atomically; with `lease_to`, held by that owner until now + `lease` from the start.

        A `request_id` already used returns that request's run instead (without its history) and
        writes nothing: a replayed request starts nothing new. A `run_id` already used raises.
        """

    def run_for_request(self, request_id: str) -> RunRecord | None:
        """The run a request with `request_id` made (`create_run`), without its history; None if none."""

    def get_run(self, run_id: str, *, history: bool = True) -> RunRecord | None:
        """One run, None if there is none; `history=False` leaves the history out (state["history"]
        is empty). Raises `IncompatibleState` for a state this Signoff cannot read."""

    def list_runs(self, *, requester: str | None = None, status: str | None = None, tool: str | None = None,
                  older_than: str | None = None, limit: int = 20) -> list[RunRecord]:
        """Recent runs, newest first (by when they were made, then by id), without history; a run
        whose state cannot be read is listed with `unreadable` set instead of hiding the others.
        `tool`: only runs that asked about or started a call of it; `older_than`: only runs after
        that run in this order (the next page of a listing that ended with it)."""

    def runs_by_id(self, run_ids: list[str]) -> dict[str, RunRecord]:
        """Several runs without their history (listed as `list_runs` lists them)."""

    def count_runs(self) -> dict[str, int]:
        """How many runs are in each status."""

    def timeline(self, run_id: str) -> list[dict[str, Any]]:
        """The run's audit events in order: `seq` (1, 2, ... per run), `type`, `at` (ISO), payload."""

    def append_event(self, run_id: str, event: dict[str, Any]) -> None:
        """Append one audit event to an existing run, numbered after the last."""

    def update_origin(self, run_id: str, origin: dict[str, Any]) -> None:
        """Record where the run is shown (its message), for progress to thread under."""

    # -- leases ---------------------------------------------------------------------------

    def claim(self, run_id: str, owner: str, lease: timedelta, *, history: bool = True) -> RunRecord | None:
        """Take the run's lease until now + `lease` if nobody else holds a live one (the holder may
        claim again) and the run has not ended (`rules.NOT_ENDED`); returns the run with its history
        (without it, as `get_run(history=False)` reads it, when `history` is False), or None.

        A run whose state cannot be read is let go again and `IncompatibleState` raised, so it
        does not stay held from other workers.
        """

    def hold(self, run_id: str, owner: str, lease: timedelta) -> bool:
        """Take the lease for a short errand whatever the run's status (recovery re-posting a
        message); False if anyone, this owner included, holds a live lease."""

    def renew(self, run_id: str, owner: str, lease: timedelta) -> bool:
        """Move the holder's lease to now + `lease`; False if `owner` no longer holds it."""

    def release(self, run_id: str, owner: str, *, told: tuple[int, ...] = ()) -> None:
        """Let go of the run if `owner` holds it (another owner's release changes nothing), and,
        in the same write, drop the notices `told` from the outbox (`relay.Relay.tell_run`), held
        or not: they were told."""

    # -- steps and requests ---------------------------------------------------------------

    def save_step(self, run_id: str, *, owner: str, version: int, checkpoint: Checkpoint, write: StepWrite,
                  lease: timedelta, clear_command: bool = False, release: bool = False,
                  told: tuple[int, ...] = ()) -> Saved:
        """Commit one step atomically: state, the history it appended, its events, the ledger
        outcome of its call (`checkpoint.execution`), the lease renewed, and `write` applied
        (`rules.step_write`: the approval it opens, those it supersedes or closes, a waiting
        request it refuses, what it owes people); the notices `told` since the run's last write
        leave the outbox in it (`relay.Relay.tell_run`). `clear_command` drops the request the step applied. `release` lets go
        of the lease instead of renewing it, unless a request waits for the run
        (`Saved.released` says which).

        Raises `Conflict`, writing nothing, if the run is not at `version` or `owner` does not hold
        its lease. Opening an approval for a key that has one in force raises too (the adapter's
        integrity error), writing nothing. Returns the new version, the approval opened, a request
        left meanwhile (and not refused), and the approvals it closed.
        """

    def clear_command(self, run_id: str, event: dict[str, Any]) -> None:
        """Drop a request that could not be applied, with `event` saying why, atomically."""

    def command_shown_at(self, run_id: str, version: int) -> tuple[dict[str, Any], datetime] | None:
        """The request a person made from a message showing the run at `version`, and when
        (among the run's latest `rules.COMMANDS_LOOKED_AT` requests)."""

    # -- recovery -------------------------------------------------------------------------

    def runs_needing_work(self, *, limit: int = 100) -> list[str]:
        """Runs no live lease holds that have something to do, least recently updated first:
        idle or running (orphaned), with a request waiting, or awaiting an approval now decided."""


class ExecutionLedger(Protocol):
    """One row per side-effecting call (its idempotency key): started, then succeeded or failed. A
    call starts through `starting_calls.begin_execution`, in a unit of work the store opens
    (`approval_unit`)."""

    def complete_execution(self, execution: dict[str, Any]) -> None:
        """Record a call's outcome (key, ok, result or error, seconds) outside a step (its step
        could not be saved)."""

    def executions(self, run_id: str) -> list[dict[str, Any]]:
        """The run's ledger rows, oldest first, with their results."""

    def running_call(self, run_id: str) -> tuple[str, str] | None:
        """(tool, key) of the run's latest call that started and has no outcome yet."""


class ApprovalStore(ApprovalUnits, Protocol):
    """Requests for a human decision on one exact call. At most one approval per key is in force
    (`approval.LIVE`); a superseded one stays for the record. Approvals are opened,
    superseded and closed by `RunStore.save_step`; people's requests of a run (which cancel or
    supersede them), decisions, reminders, expiry and break-glass reviews are `approval_commands`,
    each in a unit of work the store opens (`approval_unit`)."""

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        """One approval, None if there is none."""

    def approval_for_key(self, key: str) -> ApprovalRecord | None:
        """The call's approval in force (or, when none is, its latest)."""

    def list_approvals(self, *, status: str | None = None, run_id: str | None = None,
                       exclude_requester: str | None = None, limit: int = 50) -> list[ApprovalRecord]:
        """Approvals, newest first: by status, run, not asked by `exclude_requester`."""

    def set_glass_message(self, approval_id: str, message: dict[str, Any]) -> None:
        """Record where the break-glass's review card was posted."""

    def unreviewed_glass(self, limit: int = 100) -> list[ApprovalRecord]:
        """Approvals approved by breaking the glass and not yet reviewed, oldest first."""

    def receipt_of(self, *, approval_id: str | None = None, key: str | None = None) -> dict[str, Any] | None:
        """The signed receipt of `approval_id`'s decision, or (`key`) of the call under `key` that a
        rule or a grant let start unasked; None: not decided or started, or no key signed it."""

    def proofs(self, run_id: str | None = None) -> list[Proof]:
        """Every receipt kept and every call the execution ledger says started (of run `run_id`, or
        of all), each call with the approval it used up: what receipts are checked against."""

    def set_approval_message(self, approval_id: str, message: dict[str, Any]) -> ApprovalRecord | None:
        """Record where the request was posted; returns the approval as it is now, so a decision
        made in between can be shown."""


class GrantStore(Protocol):
    """Grants made by "Approve + allow similar" (see `approval_commands.decide`); times are the store's."""

    def live_grants(self, run_id: str, requester: str) -> list[GrantRecord]:
        """Grants in force now that could cover a call of this run: its own (scope `run`) and its
        requester's (scope `requester`), oldest first."""

    def list_grants(self, *, live: bool = True, limit: int = 50, run_id: str | None = None) -> list[GrantRecord]:
        """Grants, newest first; `live`: only those in force now; `run_id`: only those its approvals made."""

    def get_grant(self, grant_id: str) -> GrantRecord | None:
        """One grant, None if there is none."""

    def revoke_grant(self, grant_id: str, user: str) -> GrantRecord | None:
        """End a grant now (a `grant_revoked` event), atomically; the grant as it is (revoked
        before, too), or None if there is none."""


class NoticeStore(Protocol):
    """The outbox: messages owed to people (`notices.Notice`), written by the transaction of the
    change or step that owes them (`approval_change.Change.notices`, `rules.StepWrite.notices`,
    a new run's) and kept until sent (`relay.Relay`)."""

    def take_notices(self, fence: timedelta, *, run_id: str | None = None, limit: int = 50) -> list[HeldNotice]:
        """Take the approvals' notices due now (of `run_id`'s alone, when given), oldest first, for
        `fence`: until then no other caller, on any replica, takes them (but a redraw:
        `Notice.fenced`). Only an approval's first notice owed is taken, so that its messages are
        sent in order."""

    def run_notices(self, run_id: str, limit: int = 50) -> list[HeldNotice]:
        """The run's own notices due now, oldest first, up to the first that waits for its backoff
        (those after it wait for it). For the holder of the run's lease, which fences them."""

    def runs_owed_notices(self, older_than: timedelta, *, limit: int = 50) -> list[str]:
        """Runs no live lease holds whose first notice of their own is due and was made more than
        `older_than` ago: runs to recover."""

    def hold_notice(self, seq: int, fence: timedelta) -> bool:
        """Keep the run's notice from every other teller for `fence`, even past the run's lease
        (a card about to be posted: `run_notices.REPOST_AFTER`); False if it is gone (told)."""

    def notice_sent(self, seq: int) -> None:
        """The notice is sent, or given up: it leaves the outbox."""

    def notice_failed(self, seq: int, retry_in: timedelta, error: str) -> None:
        """Sending it failed: it is due again in `retry_in`."""


class AuditLog(Protocol):
    """The audit log as `runtime.audit` verifies it: every run's chain of events, and the chain of runs."""

    def audit_records(self, selection: Selection = WHOLE_LOG) -> Generator[Record, None, None]:
        """The records `selection` picks, read from one snapshot (see `runtime.audit_verify.verify`);
        closing the generator lets go of the snapshot."""


class Store(RunStore, ExecutionLedger, ApprovalStore, GrantStore, NoticeStore, AuditLog, Protocol):
    """Everything the runner keeps: runs, the execution ledger and approvals, in one store, so a
    step, its approval and its call's outcome are written together."""

    def close(self) -> None:
        """Let go of what the store holds open (pooled connections); it reconnects if used again.

        Called before a process forks (gunicorn), since a connection carried into a child and closed
        there breaks the parent's (SQLite drops its locks)."""
