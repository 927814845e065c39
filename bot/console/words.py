"""What the console tells a person after a decision or an edit, in plain text (the Slack edge words
the same outcomes in mrkdwn)."""

from __future__ import annotations

from typing import assert_never

from signoff.bot.words import approval_progress
from signoff.runtime.records import (
    AlreadyCounted,
    AlreadyDecided,
    AlreadyDone,
    Counted,
    Decided,
    DecisionOutcome,
    Done,
    Expired,
    Mismatch,
    Missing,
    NotAllowed,
    Refused,
    RunOutcome,
)


def decision_words(outcome: DecisionOutcome) -> str:
    match outcome:
        case Decided(approval=approval):
            if approval.status == "approved":
                return f"Approved: {approval.tool} runs now, once."
            return f"Denied: {approval.tool} does not run."
        case Counted(approval=approval):
            return f"Your approval is counted ({approval_progress(approval)})."
        case AlreadyCounted(approval=approval):
            return f"You already decided this one; one person counts once ({approval_progress(approval)})."
        case AlreadyDecided(approval=approval):
            return f"Someone decided first: {approval.status} by {approval.decided_by or 'nobody'}. Nothing changed."
        case Expired():
            return "This request expired before your decision; nothing ran."
        case NotAllowed(reason=reason) | Mismatch(reason=reason):
            return f"Not done: {reason}."
        case Missing(what=what):
            return f"This {what} no longer exists."
        case _:
            assert_never(outcome)


def edit_words(outcome: RunOutcome) -> tuple[str | None, str | None]:
    """(what to say, the error to show beside the arguments)."""
    match outcome:
        case Done():
            return "Your edit is saved: a new request follows, to be approved like any other.", None
        case Refused(reason=reason):
            return None, reason
        case NotAllowed(reason=reason):
            return f"Not done: {reason}.", None
        case AlreadyDone(what=what, by=by):
            return f"Already done: {what} by {by or 'someone'}.", None
        case Missing(what=what):
            return f"This {what} no longer exists.", None
        case _:
            assert_never(outcome)
