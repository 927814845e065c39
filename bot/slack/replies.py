"""What people are told became of what they asked: decisions, run buttons, refusals. Pure: mrkdwn out.

A channel card shows `approval_outcome`; the person who clicked hears the sentences below it.
"""

from __future__ import annotations

from datetime import datetime

from signoff.bot.slack.blocks import MAX_REASON, safe, slack_date, user
from signoff.bot.words import (
    allowing_similar,
    approval_words,
    capitalized,
    counted,
    deciders,
    goes_on_after_expiry,
    grant_offer,
    not_done,
    people,
    request_words,
    timed_out_words,
)
from signoff.runtime.records import ApprovalRecord, GrantRecord

APPROVAL_GONE = "This approval request no longer exists."
NO_VISIBLE_RUN = "There is no run `{run}` you can see."
"""Also for runs that exist but are not the person's to see: the answer must not tell them apart."""


def approval_outcome(approval: ApprovalRecord, grant: GrantRecord | None = None) -> tuple[str, str]:
    """(mrkdwn, plain) lines saying what became of an approval: who, when, why; the plain one is
    `words.approval_words`, as the terminal says it. `grant`: the grant its approve made."""
    plain = capitalized(approval_words(approval.status, deciders(approval)))
    when = f" {slack_date(approval.decided_at)}" if approval.decided_at else ""
    who = deciders(approval, user) or "someone"
    note = f": {safe(approval.note, MAX_REASON)}" if approval.note else ""
    similar = _similar(approval, grant)
    match approval.status:
        case "approved" | "consumed":
            return f":white_check_mark: *Approved* by {who}{when}{similar}{note}", plain + similar
        case "denied":
            return f":no_entry: *Denied* by {who}{when}{note}{_overruled(approval)}", plain
        case "expired" if approval.decided_by:
            return f":hourglass: *Approved* by {who}{when}, *but it could not start in time: not executed.*", plain
        case "expired" if approval.asked is not None and goes_on_after_expiry(approval.asked):
            # A timeout, never a denial: the model hears that nobody decided, and the run goes on.
            return (f":hourglass: *Expired, not executed:* {timed_out_words(approval.asked)}. The model was told, "
                    "and the run goes on without it.", plain)
        case "expired":
            return ":hourglass: *Expired, not executed.*", plain
        case "cancelled":
            return f":no_entry_sign: *Cancelled, not executed.*{note}", plain
        case "superseded" if approval.decided_by:
            return (f":pencil2: *Edited* by {user(approval.decided_by)}{when} — a new request follows, with the "
                    "changed arguments; nothing was executed with these.", plain)
        case "superseded":
            return (":arrows_counterclockwise: *Replaced, not executed:* the tool changed before this call ran, "
                    "so it is asked about again in a new request.", plain)
        case _:
            return ":raised_hand: *Waiting for a decision.*", plain


def approval_fallback(approval: ApprovalRecord, grant: GrantRecord | None = None) -> str:
    """`approval_outcome`'s plain line with its people as mentions, for a message's `text` (Slack
    shows mentions there too, in notifications), e.g. `Approved by <@U0LEAD>`."""
    similar = _similar(approval, grant) if approval.status in ("approved", "consumed") else ""
    return capitalized(approval_words(approval.status, deciders(approval, user))) + similar


def _similar(approval: ApprovalRecord, grant: GrantRecord | None) -> str:
    """`, allowing similar calls for 30 min` after an approve that made `grant`."""
    offer = grant_offer(approval.asked)
    return f", {allowing_similar(offer)}" if grant is not None and offer is not None else ""


def _overruled(approval: ApprovalRecord) -> str:
    """A deny is a veto: the approvals it overruled, if a quorum had begun to fill."""
    approved = approval.approved_by
    if not approved:
        return ""
    return (f" (a veto: {len(approved)} of {counted(approval.quorum, 'approval')} had been given, by "
            f"{people([user(u) for u in approved])})")


def no_visible_run(run_id: str) -> str:
    """`NO_VISIBLE_RUN` for `run_id`."""
    return NO_VISIBLE_RUN.format(run=safe(run_id, 80))


def done_text(what: str, by: str | None, at: datetime | None) -> str:
    """e.g. "Extended by @lee; the run continues." for the message whose buttons were pressed."""
    did, then = request_words(what)
    when = f" {slack_date(at)}" if at else ""
    return f"{capitalized(did)} by {user(by) if by else 'someone'}{when}" + (f"; {then}." if then else ".")


def already_text(what: str, by: str | None, at: datetime | None) -> str:
    """e.g. "Already extended by @lee <date>; nothing changed." for a second press."""
    did, _ = request_words(what)
    when = f" {slack_date(at)}" if at else ""
    return f"Already {did} by {user(by) if by else 'someone'}{when}; nothing changed."


def expired_text(approval: ApprovalRecord) -> str:
    """A pending approval past its deadline, as the person who clicked it is told."""
    goes_on = " The model was told nobody decided in time, and the run goes on." if goes_on_after_expiry(
        approval.asked) else ""
    return f"This request expired {slack_date(approval.expires_at)}; nothing was executed.{goes_on}"


def decided_text(approval: ApprovalRecord) -> str:
    """What became of an approval, for someone who clicks it after it was decided."""
    when = f" {slack_date(approval.decided_at)}" if approval.decided_at else ""
    who = deciders(approval, user) or "someone"
    match approval.status:
        case "approved" | "consumed":
            return f"Already approved by {who}{when}."
        case "denied":
            return f"Already denied by {who}{when}."
        case "expired" if approval.decided_by:
            return f"Approved by {who}{when}, but it could not start in time; nothing was executed."
        case "expired":
            return expired_text(approval)
        case "cancelled":
            return "This request was cancelled with its run; nothing was executed."
        case "superseded" if approval.decided_by:
            return (f"This request was edited by {user(approval.decided_by)}{when}; decide the new request that "
                    "follows it. Nothing was executed.")
        case "superseded":
            return "This request was replaced by a new one (its tool changed); nothing was executed."
        case _:
            return "This request is still waiting for a decision."


def not_done_text(reason: str) -> str:
    """A runner's refusal (`NotAllowed`, `Mismatch`, `Refused`), as the person who asked is told."""
    return capitalized(not_done(safe(reason, 500)))
