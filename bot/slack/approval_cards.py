"""The pieces of an approval card: its top (what it asks, the goal, the model's words), each call on
the card of a turn's several, and where a request stands, as the card, App Home, `/signoff list` and
`status` say it: who may decide it, how far its quorum is, who edited the call before anyone approved it.
`messages` puts them together. Pure: records in, blocks and mrkdwn out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from signoff.bot.slack.argument_blocks import (
    BATCH_PREVIEW_CHARS,
    ShownArguments,
    full_preview_button,
    preview_blocks,
)
from signoff.bot.slack.blocks import (
    APPROVAL_BLOCK,
    GOAL_CHARS,
    actions,
    budget_line,
    code,
    context,
    escape,
    header,
    model_says,
    rule_name,
    run_link,
    safe,
    section,
    slack_date,
    user,
)
from signoff.bot.slack.on_call import OnCallNow
from signoff.bot.slack.replies import approval_outcome
from signoff.bot.words import approval_preview, approval_progress, bound_preview, edited_changes, who_decides
from signoff.runtime.people import Schedule, is_slack_user, schedule_of
from signoff.runtime.records import ApprovalRecord, RunRecord

OnCallLookup = Callable[[Schedule], OnCallNow]
"""Who a schedule has on call now (`Approvers.on_call`), for the cards that name them."""


@dataclass(frozen=True)
class AskedWith:
    """What a card shows of the moment its call was asked about, which every later drawing of it
    keeps: once the call is decided the run moves on (its pending call cleared, its usage grown),
    and a card redrawn from that newer state would lose what the decision was made on."""

    preview: Mapping[str, Any] | None
    """The preview the approval was asked with and is bound to (`words.approval_preview`)."""
    budget: str | None
    """The budget line as it stood then (`blocks.budget_line`); None: no longer known, and the card
    shows none rather than the run's newer figures."""


FORGOTTEN = AskedWith(preview=None, budget=None)
"""A card of an approval asked before approvals kept `asked_with`, drawn after its run moved on."""


def asked_with(run: RunRecord, approval: ApprovalRecord) -> AskedWith | None:
    """What `approval`'s card showed when it was asked: as the approval keeps it (`asked_with`),
    or, for one asked before approvals kept it, as `run` shows it while it still waits on that very
    call (its pending call, or one of its turn's, has the approval's key and arguments); None once
    it has moved on."""
    kept = approval.asked_with
    if kept is not None:
        return AskedWith(bound_preview(approval, kept.get("preview")), budget_line(kept))
    calls = [run.state.get("pending"), *(c.get("pending") for c in (run.state.get("batch") or {}).get("calls", []))]
    waits = run.status == "awaiting_approval" and any(
        call and call.get("key") == approval.key and call.get("args") == approval.args for call in calls)
    return AskedWith(approval_preview(run, approval), budget_line(run.state)) if waits else None


_WORKSPACE_DOMAIN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_CHANNEL = re.compile(r"^[CG][A-Z0-9]{2,30}$")
_MESSAGE_TS = re.compile(r"^\d{9,12}\.\d{6}$")


def thread_link(origin: Mapping[str, Any], label: str) -> str | None:
    """A link to the run's own message (its thread is under it): Slack's permalink form,
    `https://<domain>.slack.com/archives/<channel>/p<ts without its dot>`, where the run's origin
    names its workspace's domain (`domain`, as a slash command's `team_domain` gives it). Without
    one, the link opens the run's channel (`run_link`); None for a run not posted in a channel."""
    domain, channel, ts = origin.get("domain"), origin.get("channel"), origin.get("ts")
    if not all(isinstance(part, str) for part in (domain, channel, ts)):
        return run_link(origin, label)
    assert isinstance(domain, str) and isinstance(channel, str) and isinstance(ts, str)
    if not (_WORKSPACE_DOMAIN.match(domain) and _CHANNEL.match(channel) and _MESSAGE_TS.match(ts)):
        return run_link(origin, label)
    url = f"https://{domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
    return f"<{escape(url)}|{safe(label, 80)}>"


def card_head(run: RunRecord, title: str, said: str | None) -> list[dict[str, Any]]:
    """The top of an approval card: what it asks (`title`), the run's goal and who asked it, and what
    the model said beside the call, if anything."""
    link = thread_link(run.origin, "see the run")
    return [header(title),
            section(f"*Goal* (asked by {asked_by(run)}{f' · {link}' if link else ''})\n"
                    f">{safe(run.goal, GOAL_CHARS)}"),
            *([section(model_says(said))] if said else [])]


def asked_by(run: RunRecord) -> str:
    """Who asked: the person who started the run; or, for a call a program asked about over the
    approval API, its key (what is known), the Slack user the key speaks for, and whom the program
    says it asks for, in its own words, marked as such (it is not checked)."""
    api = run.origin.get("api")
    if not isinstance(api, dict):
        return user(run.requester)
    words = f"the API key `{safe(api.get('key'), 64)}`"
    if is_slack_user(run.requester):
        words += f" for {user(run.requester)}"
    said = api.get("requester")
    if isinstance(said, str) and said.strip() and said != run.requester:
        words += f", on behalf of “{safe(said, 80)}” (the caller's words, not checked)"
    return words


def batch_call_blocks(run: RunRecord, place: int, approval: ApprovalRecord, shown: ShownArguments,
                      preview: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One call on the card of a turn's several (`place`: its number there): its arguments, preview
    (as it was asked with) and edit; then its outcome once decided, or who decides, until when, and
    its own buttons (a click on them decides that call alone)."""
    edited = batch_edited(run, approval)
    blocks = [section(f"*{place}. `{safe(approval.tool, 64)}`* · key `{safe(approval.key, 120)}`\n{shown.label}"),
              *shown.sections, *(preview_blocks(preview, BATCH_PREVIEW_CHARS) if preview else []),
              *([section(edited_line(edited))] if edited else [])]
    if approval.status != "pending":
        return [*blocks, section(approval_outcome(approval)[0])]
    deciders, progress = deciders_line(approval), quorum_progress(approval)
    standing = [f"*Who decides* {deciders}"] if deciders else []
    standing.append(f"expires {slack_date(approval.expires_at)}")
    return [*blocks, context(*standing, *([progress] if progress else [])),
            actions(f"{APPROVAL_BLOCK}.{place}", [*shown.buttons, *full_preview_button(run, approval, shown)])]


def batch_edited(run: RunRecord, approval: ApprovalRecord) -> Mapping[str, Any] | None:
    """Who edited this call of a turn's several and how (`pending_calls.Edited`), from the run's state."""
    batch = run.state.get("batch") or {}
    call = next((c for c in batch.get("calls") or () if c.get("key") == approval.key), None)
    return edited_changes(call.get("pending") if call else run.state.get("pending"), approval)


def edited_line(edited: Mapping[str, Any]) -> str:
    """Who changed the call before anyone approved it, and each change from what the model
    proposed, e.g. `amount_usd: "500.00" -> "50.00"` (as `edits.argument_changes` wrote them)."""
    by = edited.get("by")
    changes = [str(change) for change in edited.get("changes") or ()]
    return (f":pencil2: *Edited* by {user(by) if by else 'someone'} before anyone approved it. Changed from what "
            f"the model proposed:\n{code(chr(10).join(changes) or 'nothing', 1500)}")


_NAMED_APPROVERS = 12
"""Approvers a card names; a longer list is counted (the policy file has them all)."""
_LISTED_VOTES = 20


def deciders_line(approval: ApprovalRecord, on_call: OnCallLookup | None = None) -> str | None:
    """Who may decide and under which part of the policy, e.g. `2 approvals from @finance · rule
    `big-refunds``; None for an approval recorded before Signoff had policies (its card is as it was).
    An on-call schedule among them is named with who is on call in it, when `on_call` can say."""
    if approval.asked is None:
        return None
    approvers = [str(a) for a in approval.asked.get("approvers") or ()]
    asked = {**approval.asked, "quorum": approval.quorum, "approvers": approvers[:_NAMED_APPROVERS], "rule": None}
    more = len(approvers) - _NAMED_APPROVERS
    who = who_decides(asked, lambda entry: approver_name(entry, on_call)) + (f" and {more} more" if more > 0 else "")
    rule = approval.rule
    return f"{who} · " + (f"rule {rule_name(rule)}" if rule else "default policy")


def approver_name(entry: str, on_call: OnCallLookup | None = None) -> str:
    """An approver entry as a card names it: a mention, or for an on-call schedule, e.g. `on call in
    pagerduty:P1ABCDE (<@U1>, <@U2>)`, or that it could not be read (so nobody from it may decide)."""
    schedule = schedule_of(entry)
    if schedule is None:
        return user(entry)
    named = f"on call in {safe(str(schedule), 120)}"
    if on_call is None:
        return named
    now = on_call(schedule)
    if not now.readable:
        return f"{named} (the schedule cannot be read now: nobody from it may decide)"
    people = ", ".join(user(person) for person in now.users[:_NAMED_APPROVERS])
    return f"{named} ({people or 'nobody now'})"


def quorum_progress(approval: ApprovalRecord) -> str | None:
    """How far a pending quorum is, each approval with who gave it and when; None for a quorum of one."""
    if approval.quorum <= 1 or approval.status != "pending":
        return None
    votes = [vote for vote in approval.votes if vote.approved]
    given = [f":white_check_mark: {user(vote.user)} {slack_date(vote.at)}" for vote in votes[:_LISTED_VOTES]]
    if len(votes) > _LISTED_VOTES:
        given.append(f"and {len(votes) - _LISTED_VOTES} more")
    return f"*Approvals* {len(votes)} of {approval.quorum}: " + (", ".join(given) if given else "none yet")


_WAITING_NAMED = 5
"""Calls a run's message names while it waits; the cards have them all."""


def waiting_lines(approvals: Sequence[ApprovalRecord]) -> list[str]:
    """What a run waits for, on its message: each pending call and who decides it, as its card says it."""
    waiting = [approval for approval in approvals if approval.status == "pending"]
    lines = [f"`{safe(approval.tool, 64)}`: " + (deciders_line(approval) or "the approvers")
             for approval in waiting[:_WAITING_NAMED]]
    more = len(waiting) - _WAITING_NAMED
    return lines + ([f"and {more} more"] if more > 0 else [])


def waiting_progress(approval: ApprovalRecord) -> str:
    """` · 1 of 2 approvals: @lee` for a quorum that is filling up, else nothing (Home, list, status)."""
    return f" · {approval_progress(approval, user)}" if approval.quorum > 1 else ""
