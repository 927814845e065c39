"""What Slack says as an approval's time passes: a reminder while it still waits (in the card's
thread, and to each approver named by id), an escalation when nobody decided in time (in the thread,
and to each person it added), and the requester's DM when it expired and the run went on without the
call. Pure: records in, messages out; untrusted strings pass through `bot.slack.blocks.safe`.
"""

from __future__ import annotations

from collections.abc import Sequence

from signoff.bot.slack.approval_cards import OnCallLookup, deciders_line, waiting_progress
from signoff.bot.slack.blocks import (
    Message,
    fallback_text,
    notice,
    rule_name,
    run_link,
    safe,
    section,
    slack_date,
    user,
)
from signoff.bot.words import people, timed_out_words
from signoff.runtime.durations import spoken
from signoff.runtime.records import ApprovalRecord, RunRecord


def reminder_message(approval: ApprovalRecord, on_call: OnCallLookup | None = None) -> Message:
    """In the card's thread: the request still waits, for whom (who is on call now, as `on_call`
    says), until when."""
    deciders = deciders_line(approval, on_call)
    who = f" for {deciders}" if deciders else ""
    text = (f":bell: *Reminder:* this request still waits{who}{waiting_progress(approval)}; it expires "
            f"{slack_date(approval.expires_at)}.")
    return Message(fallback_text(f"Reminder: {approval.tool} still waits for a decision"), [section(text)])


def reminder_dm(run: RunRecord, approval: ApprovalRecord) -> Message:
    """To each approver named by id: the request waits for their decision."""
    text = (f":bell: *Reminder:* `{safe(approval.tool, 64)}` for {user(run.requester)}'s run "
            f"`{safe(run.run_id, 80)}` waits for your decision; it expires {slack_date(approval.expires_at)}."
            f"{_card_link(approval)}")
    return Message(fallback_text(f"Reminder: {approval.tool} waits for your decision"), [section(text)])


def escalation_message(approval: ApprovalRecord, added: Sequence[str]) -> Message:
    """In the card's thread: who the escalation added, and why."""
    text = (f":rotating_light: *Escalated:* nobody decided within {_escalated_after(approval)}, so "
            f"{people([user(i) for i in added]) or 'more people'} may decide it now; it expires "
            f"{slack_date(approval.expires_at)}.")
    return Message(fallback_text(f"Escalated: {approval.tool} may now be decided by more people"), [section(text)])


def escalation_dm(run: RunRecord, approval: ApprovalRecord) -> Message:
    """To each person the escalation added: they may decide the request now."""
    rule = f" (rule {rule_name(approval.rule)})" if approval.rule else ""
    text = (f":rotating_light: You may now decide `{safe(approval.tool, 64)}` for {user(run.requester)}'s run "
            f"`{safe(run.run_id, 80)}`: nobody decided within {_escalated_after(approval)}, so the approval "
            f"policy{rule} added you. It expires {slack_date(approval.expires_at)}.{_card_link(approval)}")
    return Message(fallback_text(f"You may now decide {approval.tool}"), [section(text)])


def _escalated_after(approval: ApprovalRecord) -> str:
    after = ((approval.asked or {}).get("escalate") or {}).get("after_seconds")
    return spoken(after) if isinstance(after, int | float) else "the time the policy gives"


def _card_link(approval: ApprovalRecord) -> str:
    link = run_link(approval.message or {}, "See the request")
    return f" {link}." if link else ""


def expired_dm(run: RunRecord, approval: ApprovalRecord) -> Message:
    """To the requester: their run's approval expired, its rule says the run goes on without the
    call, and what the model was told (a run that ends as expired is told by its ending's notice)."""
    return notice(f"Your run `{safe(run.run_id, 80)}` waited too long: the approval for "
                  f"`{safe(approval.tool, 64)}` expired {slack_date(approval.expires_at)}. Nothing was executed: "
                  f"the model was told {timed_out_words(approval.asked or {})}, and the run goes on without it.")
