"""The commands that change approvals, each one transaction: load and hold, ask the aggregate's
transition (`approval.py`, `break_glass.py`), save what it returns. A person's request of a run
(`set_command`) is one of them: taking it cancels or supersedes approvals in the same write.

Written once for every store: a store only opens the unit (`approval_unit.ApprovalUnit`), so the
memory store and the SQL stores behave the same because neither decides anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from signoff.runtime.approval import (
    OPEN,
    cancel_pending,
    close,
    expire,
    nudge,
    opened,
    overdue,
    reopen,
    supersede_by_edit,
    vote,
)
from signoff.runtime.approval_change import Change
from signoff.runtime.approval_unit import ApprovalUnit, ApprovalUnits, Due
from signoff.runtime.break_glass import GlassDue, ReviewOutcome, Verdict, follow_up, review
from signoff.runtime.events import command_recorded
from signoff.runtime.ids import new_approval_id, new_grant_id
from signoff.runtime.receipts import SigningKey, decision_receipt
from signoff.runtime.records import ApprovalRecord, CommandRefusal, Decided, Missing, Nudged, Voted
from signoff.runtime.rules import CommandRule, StepWrite, command_refusal

SWEPT_AT_ONCE = 100
"""The most reminders, escalations or break-glass follow-ups one sweep makes (the rest: the next)."""


def decide(store: ApprovalUnits, approval_id: str, *, approved: bool, user: str, note: str = "",
           digest: str | None = None, grant: bool = False, lease_to: str | None = None,
           lease: timedelta | None = None, step_up: Mapping[str, Any] | None = None,
           glass: str | None = None, signer: SigningKey | None = None,
           start_within: timedelta = timedelta(0)) -> Voted:
    """Count one person's decision on a pending, unexpired approval (bound to `digest`, when
    given), atomically, whoever else decides at once on whichever replica (`approval.vote` says how).

    A person counts once (`AlreadyCounted`); a deny is a veto; an approve is `Counted` until the
    approval's `quorum` of distinct people approved. Of any number of concurrent callers exactly one
    gets `Decided`; the others learn who decided (`AlreadyDecided`) or that it expired (`Expired`).
    Everything below happens in the decision's own transaction:

    - `grant`: the approve that decides it makes the grant its rule offers ("Approve + allow similar").
    - `lease_to`, `lease`: the decision takes the run's lease for that owner if it is free (as `claim`).
    - `step_up`: the fresh sign-in it was made with, kept in the event that counts it.
    - `glass`: the reason given for breaking the glass: the approve decides alone, where the rule offers it.
    - `signer`, `start_within`: the decision's receipt (`receipts.decision_receipt`), signed and kept.
    """
    with store.approval_unit() as unit:
        approval = unit.approval(approval_id)
        if approval is None:
            return Missing("approval")
        voted, change = vote(approval, user=user, approved=approved, now=unit.now, note=note, digest=digest,
                             grant_id=new_grant_id() if grant else None, step_up=step_up, glass=glass)
        if change is not None:
            unit.save([change])
        if not isinstance(voted, Decided):
            return voted
        if signer is not None:
            voted = dataclasses.replace(voted, receipt=_kept_receipt(unit, voted, signer, start_within, step_up))
        if lease_to is not None and lease is not None and unit.take_lease(voted.approval.run_id, lease_to, lease):
            voted = dataclasses.replace(voted, lease=lease_to)
        return voted


def _kept_receipt(unit: ApprovalUnit, decided: Decided, signer: SigningKey, start_within: timedelta,
                  step_up: Mapping[str, Any] | None) -> dict[str, Any]:
    receipt = decision_receipt(decided.approval, signer, start_within=start_within, step_up=step_up,
                               grant_id=decided.grant.grant_id if decided.grant is not None else None)
    unit.keep_receipt(receipt)
    return receipt


def expire_due(store: ApprovalUnits) -> list[ApprovalRecord]:
    """Every pending approval past its expiry becomes expired (`approval.expire`), each with an
    `approval_expired` event, in one transaction; returns them. Concurrent sweeps never return one
    approval twice."""
    with store.approval_unit() as unit:
        changes = [expire(approval, unit.now) for approval in unit.due(Due.EXPIRY) if overdue(approval, unit.now)]
        unit.save(changes)
    return [change.after for change in changes]


def nudge_due(store: ApprovalUnits, limit: int = SWEPT_AT_ONCE) -> list[Nudged]:
    """Make every reminder and escalation now due of pending approvals (`approval.nudge`), each
    once whichever replica asks, with its event: an escalation adds its people to the approval's
    approvers in the same write. A sweep after a restart makes only what is due."""
    with store.approval_unit() as unit:
        made = [nudged for approval in unit.due(Due.NUDGE, limit) if (nudged := nudge(approval, unit.now)) is not None]
        unit.save([change for _, change in made])
    return [nudged for nudged, _ in made]


def review_glass(store: ApprovalUnits, approval_id: str, *, user: str, verdict: Verdict,
                 note: str = "") -> ReviewOutcome | Missing:
    """Record the first review of the break-glass that approved the approval (`break_glass.review`),
    atomically: a second one, from anyone on any replica, is `AlreadyReviewed`; its follow-ups stop."""
    with store.approval_unit() as unit:
        approval = unit.approval(approval_id)
        if approval is None:
            return Missing("approval")
        reviewed, change = review(approval, user=user, verdict=verdict, note=note, now=unit.now)
        if change is not None:
            unit.save([change])
        return reviewed


def glass_due(store: ApprovalUnits, limit: int = SWEPT_AT_ONCE) -> list[GlassDue]:
    """Make every break-glass follow-up now due (`break_glass.follow_up`), each once whichever
    replica asks, with its event."""
    with store.approval_unit() as unit:
        made = [found for approval in unit.due(Due.GLASS, limit) if (found := follow_up(approval, unit.now)) is not None]
        unit.save([change for _, change in made])
    return [due_now for due_now, _ in made]


def set_command(store: ApprovalUnits, run_id: str, command: dict[str, Any], rule: CommandRule,
                audited: dict[str, Any] | None = None) -> CommandRefusal | None:
    """Leave a person's request for the run's worker, atomically with its `command_recorded` event
    and what `rule` does at once; None if it was taken, else why not (`rules.command_refusal`), and
    nothing changed. The event holds `audited` (the command with its secrets redacted), or the
    command itself.

    Taken only while the run is in `rule.accepts` and no other request waits, and, when the command
    carries `shown_version` (pressed on a message showing the run at that version), only while the
    run is still at it: a replayed click, or one on an old copy of the message, changes nothing.
    `rule.closes_pending_approval`: the run's pending approvals are cancelled, so a late click sees
    "cancelled". `rule.supersedes_its_approval`: the approval it names (`approval_id`, `digest`) is
    superseded, and the request refused if it is not this run's pending approval any more, or never
    was (`approval.supersede_by_edit`).
    """
    shown, by = command.get("shown_version"), command.get("by")
    with store.approval_unit() as unit:
        run = unit.run(run_id)
        if run is None:
            return command_refusal(None, None, None, shown)
        if run.status not in rule.accepts or run.command is not None or shown not in (None, run.version):
            return command_refusal(run.status, run.command, run.version, shown)
        closes = rule.closes_pending_approval or rule.supersedes_its_approval
        pending = unit.of_run(run_id, ("pending",)) if closes else []  # only this run's, whatever it names
        changes = []
        if rule.closes_pending_approval:
            changes += [change for approval in pending if (change := cancel_pending(approval, unit.now, by)) is not None]
        if rule.supersedes_its_approval:
            named = next((a for a in pending if a.approval_id == command.get("approval_id")), None)
            superseded = supersede_by_edit(named, run_id=run_id, digest=command.get("digest"), by=by, now=unit.now)
            if isinstance(superseded, CommandRefusal):
                return superseded  # the approval was decided first: nothing of this request is kept
            changes.append(superseded)
        unit.leave_command(run_id, command)
        unit.save(changes)
        unit.append(run_id, [command_recorded(audited or command)])
        return None


def save_step_approvals(unit: ApprovalUnit, run_id: str, requester: str,
                        write: StepWrite) -> tuple[tuple[ApprovalRecord, ...], list[ApprovalRecord]]:
    """What saving a step does to the run's approvals, in the step's own transaction (`Store.save_step`
    opens `unit` on it): the approvals it opens, and those it closes (the run's, when it ended; then
    the superseded, the overruled and the one reopened under a larger quorum), as they are now. An
    approval changes once: the first of those that applies to it."""
    now = unit.now
    changes: dict[str, Change] = {}

    def changed(approvals: list[ApprovalRecord], change_of: Callable[[ApprovalRecord], Change | None]) -> None:
        for approval in approvals:
            if approval.approval_id not in changes and (change := change_of(approval)) is not None:
                changes[approval.approval_id] = change

    for key in write.superseded:
        changed(unit.under_key(key), lambda approval: close(approval, "superseded", now))
    for key in write.overruled:
        changed(unit.under_key(key), lambda approval: close(approval, "cancelled", now))
    if (reopening := write.reopen) is not None:
        changed(unit.under_key(reopening.key), lambda approval: reopen(approval, reopening))
    replaced = list(changes.values())
    if write.close_open_approvals:
        changed(unit.of_run(run_id, OPEN), lambda approval: close(approval, "cancelled", now))
    cancelled = list(changes.values())[len(replaced):]
    asked = tuple(opened(request, approval_id=new_approval_id(), run_id=run_id, requester=requester, now=now)
                  for request in write.approvals)
    unit.save(replaced)
    for approval in asked:
        unit.open_approval(approval)
    unit.save(cancelled)
    return asked, [change.after for change in cancelled + replaced]
