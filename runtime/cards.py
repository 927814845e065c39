"""What an approval's card shows besides the approval itself, read by the runtime for the notifier.

A notifier renders; it reads nothing of the store. Whatever a card needs that is not on its
approval (the other calls of a turn's card, the grant its approve made, its signed receipt) the
runner reads and hands over with the approval, so every replica draws the same card from the same
rows, whatever it saw happen in its own process.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from signoff.runtime.digests import batch_place
from signoff.runtime.records import ApprovalRecord, GrantRecord


@dataclass(frozen=True)
class Card:
    """What a card shows of its approval beyond the approval record."""

    calls: tuple[ApprovalRecord, ...] = ()
    """The calls in force of a turn's card, in the order the model made them (the approval among
    them); () for a card of one call."""
    grant: GrantRecord | None = None
    """The grant its approve made ("Approve + allow similar"), if it made one."""
    receipt: Mapping[str, Any] | None = None
    """The signed receipt of its decision, if one is kept."""


ALONE = Card()
"""The card of a pending call of its own: nothing beyond its approval."""


def calls_in_force(found: Iterable[ApprovalRecord], approval: ApprovalRecord) -> tuple[ApprovalRecord, ...]:
    """The approvals in force of `approval`'s turn among a run's approvals `found`, in the order of
    their calls, with `approval` as given: the caller's copy is fresher than the read, unless it is
    one an edit or a reconsideration has since superseded."""
    latest: dict[str, ApprovalRecord] = {}
    for other in sorted(found, key=lambda a: (a.status != "superseded", a.requested_at)):
        if other.step == approval.step and batch_place(other.key) is not None:
            latest[other.key] = other
    known = latest.get(approval.key)
    if known is None or known.approval_id == approval.approval_id or approval.status != "superseded":
        latest[approval.key] = approval
    return tuple(sorted(latest.values(), key=lambda a: batch_place(a.key) or 0))


def made_by(grants: Iterable[GrantRecord], approval: ApprovalRecord) -> GrantRecord | None:
    """The grant among `grants` that `approval`'s approve made, if any."""
    return next((grant for grant in grants if grant.approval_id == approval.approval_id), None)
