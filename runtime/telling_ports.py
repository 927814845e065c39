"""Who the runner tells, as Protocols: the `Notifier` tells people (Slack, a terminal) and the
`Observer` watches what is committed (logs, metrics, traces). Neither is ever answered back by the
runtime, nor reads the store: what a message shows is handed to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from signoff.runtime.break_glass import FollowUp
from signoff.runtime.cards import Card
from signoff.runtime.records import ApprovalRecord, GrantRecord, RunRecord


class Notifier(Protocol):
    """Tells people what a run is doing (Slack, a terminal). Failures are logged, never fatal:
    the database is the truth and every message can be re-sent from it."""

    def run_started(self, run: RunRecord) -> dict[str, Any] | None:
        """Announce the run; return where (e.g. {"channel", "ts"}) so progress can thread under it."""

    def approval_requested(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> dict[str, Any] | None:
        """Show the request with its buttons; return where it was posted ({"channel", "ts"}). `card`:
        what it shows besides the approval (a call of a turn's several: the calls of that turn)."""

    def batch_requested(self, run: RunRecord, approvals: list[ApprovalRecord]) -> dict[str, Any] | None:
        """Show the requests of one turn's several calls together, each with its own buttons (and
        one to approve every call at once); return where it was posted. Each approval's later
        changes (`approval_decided`, ...) update that message."""

    def approval_decided(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        """Replace the buttons with the outcome: who, when, the note (and, from `card`, the grant
        the approve made and the decision's receipt)."""

    def approval_updated(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        """The approval is still pending and its card shows something new: who approved so far
        (a quorum filling up), or a requirement the policy raised. Keep its buttons."""

    def approval_reminded(self, run: RunRecord, approval: ApprovalRecord, tell: list[str]) -> None:
        """Remind the approval's people that it still waits for them (its rule's `remind`); tell
        `tell` directly (at the first reminder, those the runner found may still decide it)."""

    def approval_escalated(self, run: RunRecord, approval: ApprovalRecord, added: list[str], tell: list[str]) -> None:
        """Say that `added` (ids the rule's `escalate` just added) may decide it now; tell `tell` directly."""

    def approval_expired(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        """Mark the request "expired, not executed" and tell the requester."""

    def tool_result(self, run: RunRecord, entry: dict[str, Any], grant: GrantRecord | None) -> None:
        """Report one tool observation (a history entry with role "tool"); `grant`: the grant that
        let its call start unasked, if one did."""

    def glass_follow_up(self, run: RunRecord, approval: ApprovalRecord, kind: FollowUp,
                        receipt: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """A break-glass's follow-up (`break_glass.FOLLOW_UPS`): `tell` its channels loudly and post
        its review card, `remind` its reviewers, or say it is `overdue`; a card not yet posted is
        posted with any of them, and shows the decision's `receipt` (read only for that post).
        Returns where a card was posted ({"channel", "ts"}), if one was."""

    def glass_reviewed(self, run: RunRecord, approval: ApprovalRecord) -> None:
        """Show the review on the break-glass's review card, and tell its channels if it was flagged."""

    def run_finished(self, run: RunRecord) -> None:
        """The run is done: post the answer and show the outcome on the run message."""

    def run_stopped(self, run: RunRecord) -> None:
        """The run stopped short (budget, failure, reconciliation, cancelled, expired): say why and offer what fits."""


class Observer(Protocol):
    """Watches what is committed, for logs, metrics and traces: one stream, read and never answered.

    Called after each commit with the audit events it wrote, each with its `type` and `run_id` (as
    `RunStore.timeline` lists them, without `seq` and `at`), and the run as that commit left it (for
    a person's decision or request, as it was read just before). Failures are logged, never fatal:
    a run does not wait for, or stop because of, anyone watching it.
    """

    def observe(self, run: RunRecord, events: Sequence[Mapping[str, Any]]) -> None:
        """Take note of one commit's events, in the order they were written."""
