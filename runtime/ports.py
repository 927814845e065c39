"""What the runner needs from the world, as Protocols: fakes and adapters need not inherit anything."""

from __future__ import annotations

from typing import Any, Protocol

from signoff.runtime.records import ApprovalRecord, RunRecord


class Notifier(Protocol):
    """Tells people what a run is doing (Slack, a terminal). Failures are logged, never fatal:
    the database is the truth and every message can be re-sent from it."""

    def run_started(self, run: RunRecord) -> dict[str, Any] | None:
        """Announce the run; return where (e.g. {"channel", "ts"}) so progress can thread under it."""

    def approval_requested(self, run: RunRecord, approval: ApprovalRecord) -> dict[str, Any] | None:
        """Show the request with its buttons; return where it was posted ({"channel", "ts"})."""

    def approval_decided(self, run: RunRecord, approval: ApprovalRecord) -> None:
        """Replace the buttons with the outcome: who, when, the note."""

    def approval_expired(self, run: RunRecord, approval: ApprovalRecord) -> None:
        """Mark the request "expired, not executed" and tell the requester."""

    def tool_result(self, run: RunRecord, entry: dict[str, Any]) -> None:
        """Report one tool observation (a history entry with role "tool")."""

    def run_finished(self, run: RunRecord) -> None:
        """The run is done: post the answer and show the outcome on the run message."""

    def run_stopped(self, run: RunRecord) -> None:
        """The run stopped short (budget, failure, reconciliation, cancelled, expired): say why and offer what fits."""
