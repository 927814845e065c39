"""The messages the notifier posts and redraws: a run's, its answer and tool results, approval cards
(one call, or a turn's several) and stopped runs; and the Deny modal. Built from `bot.slack.blocks`
and the pieces in `approval_cards`, `argument_blocks`, `stopped_runs` and `tool_results`; what an
approval's reminders, escalations and expiry say is in `deadlines`. Pure: records in, dicts out.

Every untrusted string (goals, arguments, tool output, answers, reasons) passes through `bot.slack.blocks.escape`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from signoff.bot.arguments import UNKNOWN_TOOL, ToolDisplay, argument_lines
from signoff.bot.slack.approval_buttons import approve_all_button
from signoff.bot.slack.approval_cards import (
    AskedWith,
    OnCallLookup,
    batch_call_blocks,
    card_head,
    deciders_line,
    edited_line,
    quorum_progress,
    waiting_lines,
)
from signoff.bot.slack.argument_blocks import (
    BATCH_SECTIONS,
    CARD_PREVIEW_CHARS,
    CARD_SECTIONS,
    ShownArguments,
    full_preview_button,
    preview_blocks,
    shown_arguments,
)
from signoff.bot.slack.blocks import (
    APPROVAL_BLOCK,
    DENY_MODAL,
    DENY_REASON_BLOCK,
    DENY_REASON_INPUT,
    GOAL_CHARS,
    MAX_FALLBACK,
    MAX_MODAL_TITLE,
    MAX_PRIVATE_METADATA,
    MAX_REASON,
    RECONCILE_RETRY_ACTION,
    STATUS_EMOJI,
    Message,
    actions,
    budget_line,
    clip,
    context,
    fallback_text,
    model_name,
    safe,
    section,
    slack_date,
    stop_reason,
    untrusted,
    user,
)
from signoff.bot.slack.replies import approval_fallback, approval_outcome
from signoff.bot.slack.stopped_runs import recent_steps, stop_buttons, stop_title, unknown_outcome_call
from signoff.bot.slack.tool_results import (
    failed_message,
    marked_done_message,
    refused_message,
    returned_message,
)
from signoff.bot.summaries import approval_request_line, batch_request_line, call_summary
from signoff.bot.words import (
    approval_preview,
    edited_changes,
    model_words,
    receipt_words,
    status_words,
    stop_words,
)
from signoff.runtime.records import ApprovalRecord, GrantRecord, RunRecord
from signoff.runtime.schema import STOPPED, TERMINAL
from signoff.runtime.state import DEFAULT_REDACT_KEYS
from signoff.runtime.step_up import step_up_of

_ANSWER_CHARS = 2900


# -- run messages ------------------------------------------------------------------------------


def run_message(run: RunRecord, *, now: str | None = None, waiting: Sequence[ApprovalRecord] = ()) -> Message:
    """The message that announces a run in its channel; progress threads under it. It shows the
    run as it stands `now` (default: its status) with its budget used so far, and, while it waits,
    the calls it waits on and who decides them (`waiting`: its approvals)."""
    status = now or _shown_status(run)
    emoji = STATUS_EMOJI.get(status, "")
    blocks = [
        section(f"*Run for* {user(run.requester)}\n>{safe(run.goal, GOAL_CHARS)}"),
        context(f"{emoji} *{status_words(status)}* · model: {model_name(run.model)}",
                f"budget: {budget_line(run.state)} · run `{safe(run.run_id, 80)}`"),
    ]
    outcome = _waiting_line(waiting) if status == "awaiting_approval" else _outcome_line(run)
    if outcome:
        blocks.append(section(outcome))
    return Message(fallback_text(f"Signoff run {run.run_id} ({status_words(status)}): {run.goal}"), blocks)


def _shown_status(run: RunRecord) -> str:
    """Where the run stands for people. A run not yet started that a worker holds the lease of is
    being worked on: it is announced as the worker takes it, before its first step is saved (the
    step that records it as running is its first model call, which takes a while)."""
    return "running" if run.status == "idle" and run.lease_owner else run.status


def _waiting_line(approvals: Sequence[ApprovalRecord]) -> str | None:
    lines = waiting_lines(approvals)
    if not lines:
        return None
    return "*Waiting for approval* of " + (lines[0] if len(lines) == 1 else "each of:\n" + "\n".join(lines))


def _outcome_line(run: RunRecord) -> str | None:
    match run.status:
        case "done":
            return "*Done.* The answer is in the thread."
        case "idle" | "running" | "awaiting_approval":
            return None
        case _:
            return f"*Stopped: {status_words(run.status)}.* {stop_reason(run, 500)}"


def answer_message(run: RunRecord) -> Message:
    """The final answer, posted in the run's thread."""
    answer = run.answer or ""
    blocks = [section(f"*Answer*\n{safe(answer, _ANSWER_CHARS)}"),
              context(f"run `{safe(run.run_id, 80)}` · {budget_line(run.state)}")]
    return Message(fallback_text(f"Answer: {answer}"), blocks)


def tool_result_message(run: RunRecord, entry: Mapping[str, Any], *,
                        secret_names: frozenset[str] = DEFAULT_REDACT_KEYS,
                        marked_done: Mapping[str, Any] | None = None, grant: GrantRecord | None = None) -> Message:
    """One tool observation for the run's thread: its result or its error, `secret_names` redacted.

    A long JSON result is summed up, with *View full result*; `marked_done` is the request of the
    person who said a call of unknown outcome took effect, when `entry` is that call's outcome;
    `grant` is the grant that let it run unasked, when its entry names one (`entry["grant"]`).
    """
    rule = entry.get("rule") if isinstance(entry.get("rule"), str) else None
    if "error" in entry and rule is not None and entry.get("error_kind") == "denied_by_rule":
        return refused_message(entry, rule)
    if "error" in entry:
        return failed_message(entry)
    if marked_done is not None:
        return marked_done_message(entry, marked_done, secret_names)
    return returned_message(run, entry, rule, grant, secret_names)


# -- approval messages --------------------------------------------------------------------------


def approval_message(run: RunRecord, approval: ApprovalRecord, *, display: ToolDisplay = UNKNOWN_TOOL,
                     said: str | None = None, edited: Mapping[str, Any] | None = None,
                     asked: AskedWith | None = None, on_call: OnCallLookup | None = None,
                     console: str | None = None) -> Message:
    """An approval request: what would run, with what, for whom, until when, and what the model said
    beside the call; Approve (and Approve + allow similar, where its rule offers it), Deny and Edit.

    Approve is on the card only when every argument is on it in full (see `shown_arguments`). The
    model's words come from the run's history, or `said` for a run read without it; who edited the
    call and what they changed, from the run's pending call, or `edited` (`pending_calls.Edited` as JSON);
    its preview and the budget, as `asked` has them (default: as the run shows them now); who is on
    call in an on-call schedule among its approvers, as `on_call` says. A rule with `step_up` links
    to the approval's page in the web console (`console`) instead of offering Approve.
    """
    shown = shown_arguments(run, approval, display, CARD_SECTIONS, console=console)
    edited = edited_changes(run.state.get("pending"), approval) or edited
    blocks = _approval_body(run, approval, display, shown, said, edited, asked, on_call)
    progress = quorum_progress(approval)
    if progress:
        blocks.append(section(progress))
    blocks.append(actions(APPROVAL_BLOCK, [*shown.buttons, *full_preview_button(run, approval, shown)]))
    # Shown alone in notifications: what would run, and for whom. Untrusted parts are escaped one by
    # one, so the requester stays a mention.
    summary = call_summary(argument_lines(approval.args, display))
    text = approval_request_line(safe(approval.tool, 64), safe(summary, 200), user(run.requester),
                                 safe(run.run_id, 80), f"{approval.expires_at:%H:%M} UTC",
                                 user(edited.get("by")) if edited else None)
    return Message(clip(text, MAX_FALLBACK), blocks)


def decided_message(run: RunRecord, approval: ApprovalRecord, *, display: ToolDisplay = UNKNOWN_TOOL,
                    said: str | None = None, edited: Mapping[str, Any] | None = None,
                    grant: GrantRecord | None = None, asked: AskedWith | None = None,
                    receipt: Mapping[str, Any] | None = None) -> Message:
    """The approval request after the fact: the same card, with the preview and budget it was
    decided on (`asked`), its buttons replaced by the outcome (`grant`: the grant its approve made,
    "allowing similar calls for 30 min"), and the decision's signed receipt in short (`receipt`)."""
    shown = shown_arguments(run, approval, display, CARD_SECTIONS)
    edited = edited_changes(run.state.get("pending"), approval) or edited
    blocks = _approval_body(run, approval, display, shown, said, edited, asked)
    line, _ = approval_outcome(approval, grant)
    blocks.append(section(line))
    if receipt is not None:
        blocks.append(context(receipt_words(receipt)))
    text = f"{approval_fallback(approval, grant)}: {safe(approval.tool, 64)} for run {safe(run.run_id, 80)}"
    return Message(clip(text, MAX_FALLBACK), blocks)


def batch_message(run: RunRecord, approvals: Sequence[ApprovalRecord], *,
                  displays: Mapping[str, ToolDisplay] | None = None, said: str | None = None,
                  asked: Mapping[str, AskedWith] | None = None, console: str | None = None) -> Message:
    """The requests of one turn's several calls on one card, in the order the model made them: each
    call with its arguments, who decides and where it stands, its own buttons while it waits (a
    click on them decides that call alone), and Approve all for the calls approvable on the card.
    Previews and the budget are as `asked` has them, by approval id (default: as the run shows them now)."""
    displays = displays or {}
    said = (card_words(run, approvals[0]) if approvals else None) or said
    blocks = card_head(run, f"Approve {len(approvals)} call{'' if len(approvals) == 1 else 's'}?", said)
    approvable, confirming = [], []
    for place, approval in enumerate(approvals, start=1):
        display = displays.get(approval.tool, UNKNOWN_TOOL)
        shown = shown_arguments(run, approval, display, BATCH_SECTIONS, console=console)
        preview = asked[approval.approval_id].preview if asked is not None else approval_preview(run, approval)
        blocks += batch_call_blocks(run, place, approval, shown, preview)
        # Approvable as `approvable_in(approval, display, BATCH_SECTIONS)` says: the click is checked so.
        if approval.status == "pending" and shown.whole and step_up_of(approval.asked) is None:
            approvable.append(approval)
            if (approval.asked or {}).get("confirm") is True or display.confirm:
                confirming.append(approval.tool)
    if len(approvable) > 1:
        blocks.append(actions(f"{APPROVAL_BLOCK}.all", [approve_all_button(approvable, confirming=confirming)]))
    budget = _asked_budget(run, asked.values() if asked is not None else None)
    blocks.append(context(f"run `{safe(run.run_id, 80)}`" + (f" · budget used: {budget}" if budget else "")))
    waiting = sum(1 for approval in approvals if approval.status == "pending")
    # As a one-call card's: untrusted parts escaped one by one, so the requester stays a mention.
    text = batch_request_line(waiting, [safe(a.tool, 64) for a in approvals], user(run.requester),
                              safe(run.run_id, 80))
    return Message(clip(text, MAX_FALLBACK), blocks)


def card_words(run: RunRecord, approval: ApprovalRecord) -> str | None:
    """What the model said beside the call an approval is for, if `run` carries its history."""
    return model_words(run.state.get("history") or (), approval.step)


def _asked_budget(run: RunRecord, asked: Iterable[AskedWith] | None) -> str | None:
    """The budget line a card shows: as its calls were asked (calls asked together share it), or,
    with nothing `asked`, as the run shows it now."""
    if asked is None:
        return budget_line(run.state)
    return next((was.budget for was in asked if was.budget), None)


def _approval_body(
    run: RunRecord, approval: ApprovalRecord, display: ToolDisplay, shown: ShownArguments, said: str | None,
    edited: Mapping[str, Any] | None = None, asked: AskedWith | None = None, on_call: OnCallLookup | None = None,
) -> list[dict[str, Any]]:
    about = f"\n{untrusted(display.description, 300)}" if display.description else ""
    deciders = deciders_line(approval, on_call)
    preview = asked.preview if asked is not None else approval_preview(run, approval)
    budget = _asked_budget(run, [asked] if asked is not None else None)
    return [
        *card_head(run, f"Approve {approval.tool}?", card_words(run, approval) or said),
        section(f"*Tool* `{safe(approval.tool, 64)}`{about}\n{shown.label}"),
        *shown.sections,
        *(preview_blocks(preview, CARD_PREVIEW_CHARS) if preview else []),
        *([section(edited_line(edited))] if edited else []),
        *([section(f"*Who decides* {deciders}")] if deciders else []),
        context(f"key `{safe(approval.key, 120)}`" + (f" · budget used: {budget}" if budget else ""),
                f"expires {slack_date(approval.expires_at)}"),
    ]


# -- stopped runs -------------------------------------------------------------------------------


def stopped_message(run: RunRecord, *, last_steps: int = 3, display: ToolDisplay | None = None,
                    extend_steps: int | None = None) -> Message:
    """Why a run stopped short, its usage and last steps, and the buttons that fit its status.

    A call of unknown outcome is shown as an approval card shows it (`display` is its tool's): Retry
    runs it again, so it is offered only beside every argument in full. Extend says what it adds
    (`extend_steps`: `SIGNOFF_EXTEND_STEPS`; None: only "Extend").
    """
    stop = run.stop or {}
    title, buttons = stop_title(run), stop_buttons(run, extend_steps)
    lines = [f"*{title}* {stop_reason(run, 300)}"]
    if stop.get("detail"):
        lines.append(untrusted(stop["detail"], 500))
    call: list[dict[str, Any]] = []
    pending = run.state.get("pending") or {}
    fallback = f"Run {run.run_id} stopped ({status_words(run.status)}): {stop_words(stop, run.state)}"
    if stop.get("tool") and run.status == "needs_reconciliation":
        lines.append(f"Call `{safe(stop['tool'], 64)}` with key `{safe(stop.get('key', ''), 120)}` may or may not "
                     "have taken effect. Check, then mark it done, retry it, or abort the run.")
        fallback += f" Did {stop['tool']} ({stop.get('key', '')}) take effect?"
        call, retry = unknown_outcome_call(run, display)
        if not retry:
            buttons = [b for b in buttons if b["action_id"] != RECONCILE_RETRY_ACTION]
    if run.status == "expired" and pending.get("tool"):
        lines.append(f"Nobody decided `{safe(pending['tool'], 64)}` (key `{safe(pending.get('key', ''), 120)}`) in "
                     f"time, so it was not executed. {user(run.requester)} can request it again: a fresh approval, "
                     "and the run goes on from where it paused.")
    blocks = [
        section("\n".join(lines)),
        *call,
        section(f"*Goal*\n>{safe(run.goal, GOAL_CHARS)}"),
        context(f"usage: {budget_line(run.state)}", f"run `{safe(run.run_id, 80)}` · asked by {user(run.requester)}"),
    ]
    recent = recent_steps(run.state.get("history", []), last_steps)
    if recent:
        blocks.append(section("*Last steps*\n" + safe("\n".join(recent), 1500)))
    if buttons:
        blocks.append(actions("signoff.run", buttons))
    return Message(fallback_text(fallback), blocks)


def run_closed_message(run: RunRecord, note: str, *, now: str | None = None) -> Message:
    """A stopped-run notice after someone acted on it: the buttons replaced by what happened (`note`,
    safe mrkdwn) and where the run stands `now` (default: its status; a request still waiting for its
    worker reads `queued`)."""
    status = now or ("idle" if run.command is not None and run.status not in TERMINAL else run.status)
    why = f": {stop_reason(run, 300)}" if status in STOPPED and run.stop else ""
    blocks = [section(f"{note}\n*Goal*\n>{safe(run.goal, GOAL_CHARS)}"),
              context(f"{STATUS_EMOJI.get(status, '')} now *{status_words(status)}*{why} · run `{safe(run.run_id, 80)}`")]
    return Message(clip(f"{note} Run {safe(run.run_id, 80)} is now {status_words(status)}.", MAX_FALLBACK), blocks)


# -- deny modal ------------------------------------------------------------------------------------


def deny_modal(approval: ApprovalRecord, *, channel: str | None = None) -> dict[str, Any]:
    """The modal that asks for an optional reason before denying; `channel` is where to answer."""
    metadata = json.dumps({"approval": approval.approval_id, "digest": approval.digest,
                           **({"channel": channel} if channel else {})})
    assert len(metadata) <= MAX_PRIVATE_METADATA
    return {
        "type": "modal",
        "callback_id": DENY_MODAL,
        "private_metadata": metadata,
        "title": {"type": "plain_text", "text": clip(f"Deny {approval.tool}", MAX_MODAL_TITLE)},
        "submit": {"type": "plain_text", "text": "Deny"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            section(f"Deny `{safe(approval.tool, 64)}` (key `{safe(approval.key, 120)}`)? "
                    "Nothing will be executed; the model is told your reason."),
            {"type": "input", "block_id": DENY_REASON_BLOCK, "optional": True,
             "label": {"type": "plain_text", "text": "Reason"},
             "element": {"type": "plain_text_input", "action_id": DENY_REASON_INPUT, "multiline": True,
                         "max_length": MAX_REASON}},
        ],
    }
