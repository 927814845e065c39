"""One transaction over approvals, as a command of `approval_commands.py` sees it: the port a store
opens for each command, so that loading, locking and saving are the store's and every rule is not.

A unit loads approvals held until it ends (each run's row first, so deciders on any replica, and
the sweeps, change one run's approvals one after another), reads the time by the store's clock
once, and writes what the command saves whole when it ends, or nothing if it raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Protocol

from signoff.runtime.approval_change import Change
from signoff.runtime.records import ApprovalRecord


class Due(Enum):
    """Which approvals a sweep looks at, oldest due first; the transition says which it changes."""

    EXPIRY = "expiry"
    """Pending, past `expires_at` (`approval.overdue` decides)."""
    NUDGE = "nudge"
    """Pending and unexpired, `nudge_at` reached (`approval.nudge` decides)."""
    GLASS = "glass"
    """Approved by breaking the glass, not reviewed, `glass_due_at` reached (`break_glass.follow_up`)."""


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


class ApprovalUnits(Protocol):
    """A store that opens units of work over its approvals."""

    def approval_unit(self) -> AbstractContextManager[ApprovalUnit]:
        """Begin one write transaction; it commits when the `with` block ends, and is rolled back
        if the block raises."""
