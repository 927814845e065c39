"""One transaction over approvals, grants and the execution ledger, as a command sees it
(`approval_commands.py`, `starting_calls.py`): the port a store opens for each command, so that
loading, locking and saving are the store's and every rule is not.

A unit loads approvals held until it ends (each run's row first, so deciders on any replica, and
the sweeps, change one run's approvals one after another), reads the time by the store's clock
once, and writes what the command saves whole when it ends, or nothing if it raises. A command
never reads what it wrote in the same unit (the memory store's reads do not see it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Protocol

from signoff.runtime.approval_change import Change
from signoff.runtime.notices import Notice
from signoff.runtime.records import ApprovalRecord, GrantRecord


class Due(Enum):
    """Which approvals a sweep looks at, oldest due first; the transition says which it changes."""

    EXPIRY = "expiry"
    """Pending, past `expires_at` (`approval.overdue` decides)."""
    NUDGE = "nudge"
    """Pending and unexpired, `nudge_at` reached (`approval.nudge` decides)."""
    GLASS = "glass"
    """Approved by breaking the glass, not reviewed, `glass_due_at` reached (`break_glass.follow_up`)."""


@dataclass(frozen=True)
class HeldRun:
    """A run as its lease holder renewed the lease: what starting its call reads of it."""

    requester: str
    status: str
    version: int
    command: dict[str, Any] | None
    """The request waiting on the run (a Retry, say), if any."""


@dataclass(frozen=True)
class LedgerRow:
    """A call's row in the execution ledger (one per idempotency key)."""

    key: str
    status: str
    """started, succeeded or failed."""
    attempts: int
    result: Any
    error: str | None


class ApprovalUnit(Protocol):
    """What a command reads and writes in its one transaction."""

    now: datetime
    """The store's clock as the unit began: every replica's one clock."""

    def approval(self, approval_id: str) -> ApprovalRecord | None:
        """The approval with its votes, held until the unit ends; None if there is none."""

    def due(self, which: Due, limit: int | None = None) -> list[ApprovalRecord]:
        """The approvals `which` names as of `now`, held, at most `limit` of them (None: all)."""

    def save(self, changes: Sequence[Change]) -> None:
        """Write each change whole: the approval as it is now, its vote, its grant, its events on
        its run and the messages it owes (the outbox). A change of an approval that changed since
        it was loaded is a `Conflict`, and nothing of the unit is written."""

    def keep_receipt(self, receipt: Mapping[str, Any]) -> None:
        """Keep a decision's signed receipt (`receipts.decision_receipt`)."""

    def take_lease(self, run_id: str, owner: str, lease: timedelta) -> bool:
        """Lease the run to `owner` until `now` + `lease` if nobody holds a live lease and it can
        be driven (as `Store.claim`); whether it did."""

    # -- a person's request of a run, and a step's approvals ------------------------------------

    def run(self, run_id: str) -> HeldRun | None:
        """The run, held until the unit ends; None if there is none."""

    def of_run(self, run_id: str, statuses: Sequence[str]) -> list[ApprovalRecord]:
        """The run's approvals in one of `statuses`, with their votes, held, oldest first."""

    def under_key(self, key: str) -> list[ApprovalRecord]:
        """Every approval asked under the call's key, with its votes, held, oldest first."""

    def open_approval(self, approval: ApprovalRecord) -> None:
        """Keep a newly opened approval (`approval.opened`)."""

    def leave_command(self, run_id: str, command: dict[str, Any]) -> None:
        """Leave `command` waiting on the run for its worker (`Store.clear_command` drops it)."""

    # -- starting a call: the execution ledger and grants ------------------------------------

    def renew_lease(self, run_id: str, owner: str, lease: timedelta) -> HeldRun | None:
        """Renew `owner`'s live lease on the run until `now` + `lease`, holding the run; None, and
        nothing changed, when `owner` holds no live lease on it (the fence a call starts behind)."""

    def execution(self, key: str) -> LedgerRow | None:
        """The ledger's row of the call under `key`, if it has one."""

    def latest_approval(self, key: str) -> ApprovalRecord | None:
        """The newest approval asked under `key` that was not superseded, with its votes, held."""

    def grant(self, grant_id: str) -> GrantRecord | None:
        """The grant, held until the unit ends."""

    def save_grant_use(self, grant: GrantRecord) -> None:
        """Write the grant's uses and when it was last used (`approval.use_grant`)."""

    def start_execution(self, run_id: str, key: str, tool: str, digest: str) -> None:
        """Write the call's ledger row: started `now`, its first attempt."""

    def restart_execution(self, key: str, attempts: int) -> None:
        """Start the call's row, which has no outcome, again `now`, as attempt `attempts`."""

    def use_up_command(self, run_id: str, version: int) -> None:
        """Clear the request waiting on the run and move the run to `version`: a replayed or old
        request finds it gone."""

    def append(self, run_id: str, events: list[dict[str, Any]]) -> None:
        """Add `events` to the run's audit log, at `now`."""

    def owe(self, run_id: str, notices: Iterable[Notice]) -> None:
        """Keep the messages the run owes people in the outbox, due at once."""


class ApprovalUnits(Protocol):
    """A store that opens units of work over its approvals."""

    def approval_unit(self) -> AbstractContextManager[ApprovalUnit]:
        """Begin one write transaction; it commits when the `with` block ends, and is rolled back
        if the block raises."""
