"""The messages, modal and Home tab Signoff shows, built from `bot.slack.blocks`. Pure: records in, dicts out.

Every untrusted string (goals, arguments, tool output, answers, reasons) passes through `bot.slack.blocks.escape`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from signoff.bot.arguments import UNKNOWN_TOOL, ToolDisplay, argument_lines, key_text, literal
from signoff.bot.slack.approval_buttons import approval_value, approve_all_button
from signoff.bot.slack.argument_blocks import (
    CARD_PREVIEW_CHARS,
    CARD_SECTIONS,
    HOME_SECTIONS,
    MODAL_SECTIONS,
    ShownArguments,
    code_section,
    preview_blocks,
    shown_arguments,
)
from signoff.bot.slack.blocks import (
    APPROVAL_BLOCK,
    CLOSE_ACTION,
    COMMAND,
    DENY_MODAL,
    DENY_REASON_BLOCK,
    DENY_REASON_INPUT,
    EXTEND_ACTION,
    MAX_FALLBACK,
    MAX_MODAL_TITLE,
    MAX_PRIVATE_METADATA,
    MAX_REASON,
    MAX_SECTION_TEXT,
    MAX_VIEW_BLOCKS,
    RECONCILE_ABORT_ACTION,
    RECONCILE_DONE_ACTION,
    RECONCILE_RETRY_ACTION,
    REQUEST_AGAIN_ACTION,
    RESULT_MODAL,
    RETRY_ACTION,
    REVOKE_GRANT_ACTION,
    VIEW_ARGS_ACTION,
    VIEW_RESULT_ACTION,
    Message,
    actions,
    budget_limits,
    budget_line,
    button,
    clip,
    clip_lines,
    code,
    code_fits,
    code_sections,
    context,
    header,
    json_text,
    model_says,
    notice,
    run_link,
    safe,
    section,
    slack_date,
    slack_time,
    untrusted,
    user,
    with_mentions,
)
from signoff.bot.slack.payloads import run_value
from signoff.bot.slack.replies import approval_fallback, approval_outcome
from signoff.bot.words import (
    approval_preview,
    approval_progress,
    counted,
    edited_changes,
    extension_words,
    grant_uses,
    model_label,
    model_words,
    people,
    preview_text,
    result_summary,
    status_words,
    stop_words,
    timed_out_words,
    who_decides,
)
from signoff.runtime.digests import batch_place
from signoff.runtime.durations import spoken
from signoff.runtime.judging import denied_by_rule
from signoff.runtime.records import ApprovalRecord, GrantRecord, RunRecord
from signoff.runtime.schema import STOPPED, TERMINAL
from signoff.runtime.state import DEFAULT_REDACT_KEYS, Redacted, redact

_GOAL_CHARS = 600
_RESULT_CHARS = 2400
_SHORT_RESULT = 300
"""A JSON result longer than this (as shown) is summed up in the thread, in full one click away."""
_ANSWER_CHARS = 2900
_HOME_APPROVALS = 15
_HOME_RUNS = 10
_HOME_GRANTS = 8
_STATUS_EMOJI = {
    "idle": ":hourglass_flowing_sand:", "running": ":gear:", "awaiting_approval": ":raised_hand:",
    "done": ":white_check_mark:", "budget_exhausted": ":battery:", "failed": ":x:",
    "cancelled": ":no_entry_sign:", "expired": ":hourglass:", "needs_reconciliation": ":warning:",
    "stalled": ":repeat:",
}


def _fallback(text: str) -> str:
    return safe(text, MAX_FALLBACK)


def _model(spec: str) -> str:
    return safe(model_label(spec), 160)


def _stop_reason(run: RunRecord, limit: int) -> str:
    """Why the run stopped (`words.stop_words`), escaped, with whoever stopped it as a mention."""
    stop = run.stop or {}
    return with_mentions(stop_words(stop, run.state), limit, [stop.get("by"), run.requester])


# -- run messages ------------------------------------------------------------------------------


def run_message(run: RunRecord) -> Message:
    """The message that announces a run in its channel; progress threads under it."""
    emoji = _STATUS_EMOJI.get(run.status, "")
    blocks = [
        section(f"*Run for* {user(run.requester)}\n>{safe(run.goal, _GOAL_CHARS)}"),
        context(f"{emoji} *{status_words(run.status)}* · model: {_model(run.model)}",
                f"budget: {budget_line(run.state)} · run `{safe(run.run_id, 80)}`"),
    ]
    outcome = _outcome_line(run)
    if outcome:
        blocks.append(section(outcome))
    return Message(_fallback(f"Signoff run {run.run_id} ({run.status}): {run.goal}"), blocks)


def _outcome_line(run: RunRecord) -> str | None:
    match run.status:
        case "done":
            return "*Done.* The answer is in the thread."
        case "idle" | "running" | "awaiting_approval":
            return None
        case _:
            return f"*Stopped: {status_words(run.status)}.* {_stop_reason(run, 500)}"


def answer_message(run: RunRecord) -> Message:
    """The final answer, posted in the run's thread."""
    answer = run.answer or ""
    blocks = [section(f"*Answer*\n{safe(answer, _ANSWER_CHARS)}"),
              context(f"run `{safe(run.run_id, 80)}` · {budget_line(run.state)}")]
    return Message(_fallback(f"Answer: {answer}"), blocks)


def tool_result_message(run: RunRecord, entry: Mapping[str, Any], *,
                        secret_names: frozenset[str] = DEFAULT_REDACT_KEYS,
                        marked_done: Mapping[str, Any] | None = None, grant: GrantRecord | None = None) -> Message:
    """One tool observation for the run's thread: its result or its error, `secret_names` redacted.

    A long JSON result is summed up, with *View full result*; `marked_done` is the request of the
    person who said a call of unknown outcome took effect, when `entry` is that call's outcome;
    `grant` is the grant that let it run unasked, when its entry names one (`entry["grant"]`).
    """
    tool, step = safe(entry.get("tool", "?"), 64), entry.get("step", "?")
    rule = entry.get("rule") if isinstance(entry.get("rule"), str) else None
    more: list[dict[str, Any]] = []
    if "error" in entry and rule is not None and entry.get("error_kind") == "denied_by_rule":
        # The policy said no before anything ran: a refusal by rule, not a tool that failed.
        reason = str(entry["error"]).removeprefix(denied_by_rule(rule, ""))
        body = f":no_entry: `{tool}` (step {step}) refused by rule {_rule_name(rule)}: {safe(reason, _RESULT_CHARS)}"
        fallback = f"{entry.get('tool')} refused by rule {rule}: {reason}"
    elif "error" in entry:
        kind = safe(entry.get("error_kind") or "error", 30)
        body = f":x: `{tool}` (step {step}) {kind}:\n{code(entry['error'], _RESULT_CHARS)}"
        fallback = f"{entry.get('tool')} failed: {entry['error']}"
    elif marked_done is not None:
        return _marked_done_message(run, entry, marked_done, secret_names)
    else:
        shown = redact(entry.get("result"), secret_names)
        rendered = shown if isinstance(shown, str) else json_text(shown)
        granted = _granted_words(entry, grant)
        ran = (f"ran — allowed by rule {_rule_name(rule)}" if rule is not None
               else f"ran — {granted}" if granted else "returned")
        if isinstance(entry.get("edited"), str):
            ran += " (with the arguments a person edited)"
        summed_up = isinstance(shown, dict | list) and len(rendered) > _SHORT_RESULT
        if summed_up:
            summary = "\n".join(result_summary(redact(entry.get("result"), secret_names, mask=Redacted.of)))
            body = f":white_check_mark: `{tool}` (step {step}) {ran}, in short:\n{code(summary, _RESULT_CHARS)}"
        else:
            body = f":white_check_mark: `{tool}` (step {step}) {ran}:\n{code(rendered, _RESULT_CHARS)}"
        cut = not code_fits(rendered, _RESULT_CHARS)
        if (summed_up or cut) and isinstance(entry.get("step"), int):
            more = [actions("signoff.result", [button("View full result", VIEW_RESULT_ACTION,
                                                      result_value(run.run_id, entry["step"]))])]
        fallback = (f"{entry.get('tool')} ran (allowed by rule {rule}) and returned a result" if rule is not None
                    else f"{entry.get('tool')} ran (allowed by {grant.created_by if grant else 'a'} grant) and "
                         "returned a result" if granted else f"{entry.get('tool')} returned a result")
    return Message(_fallback(fallback), [section(body), *more])


def _granted_words(entry: Mapping[str, Any], grant: GrantRecord | None) -> str | None:
    """`allowed by @lee's grant, 14:05, 2 of its uses` for a call a grant let run unasked; None otherwise."""
    if not isinstance(entry.get("grant"), str):
        return None
    if grant is None or grant.grant_id != entry["grant"]:
        return f"allowed by grant `{safe(entry['grant'], 80)}`"
    return f"allowed by {user(grant.created_by)}'s grant, {slack_time(grant.created_at)}, {grant_uses(grant.uses)}"


def _marked_done_message(run: RunRecord, entry: Mapping[str, Any], request: Mapping[str, Any],
                         secret_names: frozenset[str]) -> Message:
    """A call of unknown outcome that a person said took effect: who said so, and what they said."""
    tool, step, by = safe(entry.get("tool", "?"), 64), entry.get("step", "?"), request.get("by")
    lines = [f":ballot_box_with_check: `{tool}` (step {step}) *marked done* by {user(by) if by else 'someone'}: "
             "they checked that it took effect, so it is not run again."]
    if request.get("note"):
        lines.append(f"They said: {safe(request['note'], 500)}")
    if entry.get("result") is not None:
        shown = redact(entry["result"], secret_names)
        lines.append("What it returned, as they gave it:\n"
                     + code(shown if isinstance(shown, str) else json_text(shown), _RESULT_CHARS))
    return Message(clip(f"{tool} marked done by {user(by) if by else 'someone'}", MAX_FALLBACK),
                   [section("\n".join(lines))])


def result_value(run_id: str, step: int) -> str:
    """What *View full result* carries: the run and the step whose result it shows."""
    return f"{run_id}:{step}"


def result_modal(run: RunRecord, entry: Mapping[str, Any], *,
                 secret_names: frozenset[str] = DEFAULT_REDACT_KEYS) -> dict[str, Any]:
    """A tool result in full, one line per top-level key (or item), as arguments are shown; a result
    too long even for a modal is shown up to what fits, and says where the rest is."""
    lines = _result_lines(redact(entry.get("result"), secret_names, mask=Redacted.of))
    sections = code_sections(lines, MODAL_SECTIONS - 1)
    note = ""
    if sections is None:
        kept, size = [], 0
        for line in lines:
            size += len(line) + 1
            if size > MODAL_SECTIONS * 1500:  # escaped, a line can double: stay well inside
                break
            kept.append(line)
        sections = code_sections(kept, MODAL_SECTIONS - 1) or []
        note = (f"\nOnly the first {len(kept):,} of {counted(len(lines), 'line')} fit here; "
                f"`signoff runs show {safe(run.run_id, 80)} --json` has the whole result.")
    tool = safe(entry.get("tool", "?"), 64)
    heading = f"`{tool}` (step {entry.get('step')}) returned, in full:{note}"
    blocks = [section(heading), *(code_section(s) for s in sections),
              context(f"run `{safe(run.run_id, 80)}` · asked by {user(run.requester)}")]
    assert len(blocks) <= MAX_VIEW_BLOCKS
    return {"type": "modal", "callback_id": RESULT_MODAL,
            "title": {"type": "plain_text", "text": clip(f"{entry.get('tool')} result", MAX_MODAL_TITLE)},
            "close": {"type": "plain_text", "text": "Close"}, "blocks": blocks}


def _result_lines(result: Any) -> list[str]:
    """One line per key of an object (sorted, as stored), or per item of a list, each value as
    `arguments.literal` shows it."""
    if isinstance(result, Mapping):
        return [f"{key_text(name)}: {literal(result[name])}" for name in sorted(result, key=str)]
    if isinstance(result, list):
        return [f"[{index}] {literal(item)}" for index, item in enumerate(result)] or ["[]"]
    return [literal(result)]


def _rule_name(rule: str) -> str:
    """A policy rule's name in code; the name is the operator's, escaped all the same."""
    return f"`{safe(rule, 80).replace('`', 'ˋ')}`"


# -- approval messages --------------------------------------------------------------------------


def approval_message(run: RunRecord, approval: ApprovalRecord, *, display: ToolDisplay = UNKNOWN_TOOL,
                     said: str | None = None, edited: Mapping[str, Any] | None = None) -> Message:
    """An approval request: what would run, with what, for whom, until when, and what the model said
    beside the call; Approve (and Approve + allow similar, where its rule offers it), Deny and Edit.

    Approve is on the card only when every argument is on it in full (see `shown_arguments`). The
    model's words come from the run's history, or `said` for a run read without it; who edited the
    call and what they changed, from the run's pending call, or `edited` (`pending_calls.Edited` as JSON).
    """
    shown = shown_arguments(run, approval, display, CARD_SECTIONS)
    edited = edited_changes(run.state.get("pending"), approval) or edited
    blocks = _approval_body(run, approval, display, shown, said, edited)
    progress = _progress(approval)
    if progress:
        blocks.append(section(progress))
    blocks.append(actions(APPROVAL_BLOCK, [*shown.buttons, *_full_preview_button(run, approval, shown)]))
    by = f", edited by {edited.get('by')}" if edited else ""
    text = f"Approval needed: {approval.tool} for run {run.run_id}{by} (expires {approval.expires_at:%H:%M} UTC)"
    return Message(_fallback(text), blocks)


def decided_message(run: RunRecord, approval: ApprovalRecord, *, display: ToolDisplay = UNKNOWN_TOOL,
                    said: str | None = None, edited: Mapping[str, Any] | None = None,
                    grant: GrantRecord | None = None) -> Message:
    """The approval request after the fact: the same card, its buttons replaced by the outcome
    (`grant`: the grant its approve made, "allowing similar calls for 30 min")."""
    shown = shown_arguments(run, approval, display, CARD_SECTIONS)
    blocks = _approval_body(run, approval, display, shown, said, edited_changes(run.state.get("pending"), approval)
                            or edited)
    line, _ = approval_outcome(approval, grant)
    blocks.append(section(line))
    text = f"{approval_fallback(approval, grant)}: {safe(approval.tool, 64)} for run {safe(run.run_id, 80)}"
    return Message(clip(text, MAX_FALLBACK), blocks)


BATCH_SECTIONS = 1
"""Code sections of each call's arguments on a card of several calls (each is Approved beside them in full)."""
BATCH_PREVIEW_CHARS = 400
"""How much of each call's preview a card of several calls shows."""


def _full_preview_button(run: RunRecord, approval: ApprovalRecord, shown: ShownArguments) -> list[dict[str, Any]]:
    """*View full arguments*, beside a card that cuts the call's preview short and has no such
    button already: the modal shows the preview whole."""
    preview = approval_preview(run, approval)
    if preview is None or approval.status != "pending" or any(b["action_id"] == VIEW_ARGS_ACTION for b in shown.buttons):
        return []
    room = BATCH_PREVIEW_CHARS if batch_place(approval.key) is not None else CARD_PREVIEW_CHARS
    if len(preview_text(preview.get("shown"))) <= room:
        return []
    return [button("View full preview", VIEW_ARGS_ACTION, approval_value(approval))]


def batch_message(run: RunRecord, approvals: Sequence[ApprovalRecord], *,
                  displays: Mapping[str, ToolDisplay] | None = None, said: str | None = None) -> Message:
    """The requests of one turn's several calls on one card, in the order the model made them: each
    call with its arguments, who decides and where it stands, its own buttons while it waits (a
    click on them decides that call alone), and Approve all for the calls approvable on the card."""
    displays = displays or {}
    link = run_link(run.origin, "see the run")
    said = (card_words(run, approvals[0]) if approvals else None) or said
    blocks = [header(f"Approve {len(approvals)} call{'' if len(approvals) == 1 else 's'}?"),
              section(f"*Goal* (asked by {user(run.requester)}{f' · {link}' if link else ''})\n"
                      f">{safe(run.goal, _GOAL_CHARS)}"),
              *([section(model_says(said))] if said else [])]
    approvable, confirming = [], []
    for place, approval in enumerate(approvals, start=1):
        display = displays.get(approval.tool, UNKNOWN_TOOL)
        shown = shown_arguments(run, approval, display, BATCH_SECTIONS)
        edited = batch_edited(run, approval)
        preview = approval_preview(run, approval)
        blocks += [section(f"*{place}. `{safe(approval.tool, 64)}`* · key `{safe(approval.key, 120)}`\n{shown.label}"),
                   *shown.sections, *(preview_blocks(preview, BATCH_PREVIEW_CHARS) if preview else []),
                   *([section(edited_line(edited))] if edited else [])]
        if approval.status != "pending":
            blocks.append(section(approval_outcome(approval)[0]))
            continue
        deciders, progress = deciders_line(approval), _progress(approval)
        standing = [f"*Who decides* {deciders}"] if deciders else []
        standing.append(f"expires {slack_date(approval.expires_at)}")
        blocks.append(context(*standing, *([progress] if progress else [])))
        blocks.append(actions(f"{APPROVAL_BLOCK}.{place}", [*shown.buttons,
                                                             *_full_preview_button(run, approval, shown)]))
        if shown.whole:  # as `approvable_in(approval, display, BATCH_SECTIONS)` says: the click is checked so
            approvable.append(approval)
            if (approval.asked or {}).get("confirm") is True or display.confirm:
                confirming.append(approval.tool)
    if len(approvable) > 1:
        blocks.append(actions(f"{APPROVAL_BLOCK}.all", [approve_all_button(approvable, confirming=confirming)]))
    blocks.append(context(f"run `{safe(run.run_id, 80)}` · budget used: {budget_line(run.state)}"))
    waiting = sum(1 for approval in approvals if approval.status == "pending")
    text = (f"Approval needed: {waiting} of {len(approvals)} calls ("
            f"{', '.join(dict.fromkeys(a.tool for a in approvals))}) for run {run.run_id}" if waiting else
            f"Decided: {len(approvals)} calls for run {run.run_id}")
    return Message(_fallback(text), blocks)


def batch_edited(run: RunRecord, approval: ApprovalRecord) -> Mapping[str, Any] | None:
    """Who edited this call of a turn's several and how (`pending_calls.Edited`), from the run's state."""
    batch = run.state.get("batch") or {}
    call = next((c for c in batch.get("calls") or () if c.get("key") == approval.key), None)
    return edited_changes(call.get("pending") if call else run.state.get("pending"), approval)


def card_words(run: RunRecord, approval: ApprovalRecord) -> str | None:
    """What the model said beside the call an approval is for, if `run` carries its history."""
    return model_words(run.state.get("history") or (), approval.step)


def _approval_body(
    run: RunRecord, approval: ApprovalRecord, display: ToolDisplay, shown: ShownArguments, said: str | None,
    edited: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    about = f"\n{untrusted(display.description, 300)}" if display.description else ""
    deciders = deciders_line(approval)
    link = run_link(run.origin, "see the run")
    said = card_words(run, approval) or said
    return [
        header(f"Approve {approval.tool}?"),
        section(f"*Goal* (asked by {user(run.requester)}{f' · {link}' if link else ''})\n"
                f">{safe(run.goal, _GOAL_CHARS)}"),
        *([section(model_says(said))] if said else []),
        section(f"*Tool* `{safe(approval.tool, 64)}`{about}\n{shown.label}"),
        *shown.sections,
        *(preview_blocks(preview, CARD_PREVIEW_CHARS) if (preview := approval_preview(run, approval)) else []),
        *([section(edited_line(edited))] if edited else []),
        *([section(f"*Who decides* {deciders}")] if deciders else []),
        context(f"key `{safe(approval.key, 120)}` · budget used: {budget_line(run.state)}",
                f"expires {slack_date(approval.expires_at)}"),
    ]


def edited_line(edited: Mapping[str, Any]) -> str:
    """Who changed the call before anyone approved it, and each change from what the model
    proposed, e.g. `amount_usd: "500.00" -> "50.00"` (as `requests.argument_changes` wrote them)."""
    by = edited.get("by")
    changes = [str(change) for change in edited.get("changes") or ()]
    return (f":pencil2: *Edited* by {user(by) if by else 'someone'} before anyone approved it. Changed from what "
            f"the model proposed:\n{code(chr(10).join(changes) or 'nothing', 1500)}")


_NAMED_APPROVERS = 12
"""Approvers a card names; a longer list is counted (the policy file has them all)."""
_LISTED_VOTES = 20


def deciders_line(approval: ApprovalRecord) -> str | None:
    """Who may decide and under which part of the policy, e.g. `2 approvals from @finance · rule
    `big-refunds``; None for an approval recorded before Signoff had policies (its card is as it was)."""
    if approval.asked is None:
        return None
    approvers = [str(a) for a in approval.asked.get("approvers") or ()]
    asked = {**approval.asked, "quorum": approval.quorum, "approvers": approvers[:_NAMED_APPROVERS], "rule": None}
    more = len(approvers) - _NAMED_APPROVERS
    who = who_decides(asked, user) + (f" and {more} more" if more > 0 else "")
    rule = approval.rule
    return f"{who} · " + (f"rule {_rule_name(rule)}" if rule else "default policy")


def _progress(approval: ApprovalRecord) -> str | None:
    """How far a pending quorum is, each approval with who gave it and when; None for a quorum of one."""
    if approval.quorum <= 1 or approval.status != "pending":
        return None
    votes = [vote for vote in approval.votes if vote.approved]
    given = [f":white_check_mark: {user(vote.user)} {slack_date(vote.at)}" for vote in votes[:_LISTED_VOTES]]
    if len(votes) > _LISTED_VOTES:
        given.append(f"and {len(votes) - _LISTED_VOTES} more")
    return f"*Approvals* {len(votes)} of {approval.quorum}: " + (", ".join(given) if given else "none yet")


def _waiting_progress(approval: ApprovalRecord) -> str:
    """` · 1 of 2 approvals: @lee` for a quorum that is filling up, else nothing (Home, list, status)."""
    return f" · {approval_progress(approval, user)}" if approval.quorum > 1 else ""


# -- stopped runs -------------------------------------------------------------------------------


RECONCILE_SECTIONS = 2
"""Code sections of a call's arguments a reconciliation notice holds, as an approval card does."""


def stopped_message(run: RunRecord, *, last_steps: int = 3, display: ToolDisplay | None = None,
                    extend_steps: int | None = None) -> Message:
    """Why a run stopped short, its usage and last steps, and the buttons that fit its status.

    A call of unknown outcome is shown as an approval card shows it (`display` is its tool's): Retry
    runs it again, so it is offered only beside every argument in full. Extend says what it adds
    (`extend_steps`: `SIGNOFF_EXTEND_STEPS`; None: only "Extend").
    """
    stop = run.stop or {}
    title, buttons = _stop_title(run), _stop_buttons(run, extend_steps)
    lines = [f"*{title}* {_stop_reason(run, 300)}"]
    if stop.get("detail"):
        lines.append(untrusted(stop["detail"], 500))
    call: list[dict[str, Any]] = []
    pending = run.state.get("pending") or {}
    fallback = f"Run {run.run_id} stopped ({status_words(run.status)}): {stop_words(stop, run.state)}"
    if stop.get("tool") and run.status == "needs_reconciliation":
        lines.append(f"Call `{safe(stop['tool'], 64)}` with key `{safe(stop.get('key', ''), 120)}` may or may not "
                     "have taken effect. Check, then mark it done, retry it, or abort the run.")
        fallback += f" Did {stop['tool']} ({stop.get('key', '')}) take effect?"
        arguments = argument_lines(pending.get("args", {}), display)
        sections = code_sections(arguments, RECONCILE_SECTIONS)
        if sections is not None:
            call = [section(f"*The call's arguments* ({len(arguments)}, one a line, in full)"),
                    *(code_section(s) for s in sections)]
        else:
            call = [section(f"*The call's arguments* ({len(arguments)}) are too long to show here, so Retry is "
                            f"not offered in Slack: `signoff runs resume {safe(run.run_id, 80)}` shows them all "
                            "and can retry it.")]
            buttons = [b for b in buttons if b["action_id"] != RECONCILE_RETRY_ACTION]
    if run.status == "expired" and pending.get("tool"):
        lines.append(f"Nobody decided `{safe(pending['tool'], 64)}` (key `{safe(pending.get('key', ''), 120)}`) in "
                     f"time, so it was not executed. {user(run.requester)} can request it again: a fresh approval, "
                     "and the run goes on from where it paused.")
    blocks = [
        section("\n".join(lines)),
        *call,
        section(f"*Goal*\n>{safe(run.goal, _GOAL_CHARS)}"),
        context(f"usage: {budget_line(run.state)}", f"run `{safe(run.run_id, 80)}` · asked by {user(run.requester)}"),
    ]
    recent = recent_steps(run.state.get("history", []), last_steps)
    if recent:
        blocks.append(section("*Last steps*\n" + safe("\n".join(recent), 1500)))
    if buttons:
        blocks.append(actions("signoff.run", buttons))
    return Message(_fallback(fallback), blocks)


def _stop_title(run: RunRecord) -> str:
    match run.status:
        case "budget_exhausted":
            return "Out of budget:"
        case "stalled":
            return "Stalled, going round in circles:"
        case "failed":
            return "Run failed:"
        case "needs_reconciliation":
            return "Needs reconciliation:"
        case "cancelled":
            return "Cancelled:"
        case "expired":
            return "Expired:"
        case _:
            return f"{run.status}:"


def _stop_buttons(run: RunRecord, extend_steps: int | None) -> list[dict[str, Any]]:
    # Bound to the version shown: a replay, or a press on an old copy, then finds the run moved on.
    value = run_value(run.run_id, run.version)
    match run.status:
        case "budget_exhausted":
            limit = (run.stop or {}).get("budget")
            adds = (f" ({extension_words(limit, extend_steps)})"
                    if isinstance(limit, str) and extend_steps is not None else "")
            return [button(f"Extend{adds}", EXTEND_ACTION, value, "primary"), button("Close", CLOSE_ACTION, value)]
        case "stalled":
            return [button("Let it go on", EXTEND_ACTION, value), button("Close", CLOSE_ACTION, value, "primary")]
        case "failed":
            return [button("Retry", RETRY_ACTION, value, "primary"), button("Close", CLOSE_ACTION, value)]
        case "needs_reconciliation":
            return [button("Mark done", RECONCILE_DONE_ACTION, value, "primary"),
                    button("Retry", RECONCILE_RETRY_ACTION, value),
                    button("Abort", RECONCILE_ABORT_ACTION, value, "danger")]
        case "expired" if run.state.get("pending"):  # nobody decided its call: its requester may ask again
            return [button("Request again", REQUEST_AGAIN_ACTION, value, "primary")]
        case _:
            return []


def recent_steps(history: Sequence[Mapping[str, Any]], count: int) -> list[str]:
    """One plain line for each of the last `count` model steps."""
    lines = []
    for entry in history:
        if entry.get("role") != "assistant":
            continue
        if "tool" in entry:
            lines.append(f"step {entry.get('step')}: called {clip(str(entry['tool']), 64)}")
        elif "final" in entry:
            lines.append(f"step {entry.get('step')}: answered")
        else:
            lines.append(f"step {entry.get('step')}: unusable reply")
    return [clip(line, 200) for line in lines[-count:]]


def run_closed_message(run: RunRecord, note: str, *, now: str | None = None) -> Message:
    """A stopped-run notice after someone acted on it: the buttons replaced by what happened (`note`,
    safe mrkdwn) and where the run stands `now` (default: its status; a request still waiting for its
    worker reads `queued`)."""
    status = now or ("idle" if run.command is not None and run.status not in TERMINAL else run.status)
    why = f": {_stop_reason(run, 300)}" if status in STOPPED and run.stop else ""
    blocks = [section(f"{note}\n*Goal*\n>{safe(run.goal, _GOAL_CHARS)}"),
              context(f"{_STATUS_EMOJI.get(status, '')} now *{status_words(status)}*{why} · run `{safe(run.run_id, 80)}`")]
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


# -- App Home and /signoff replies ------------------------------------------------------------------


def home_view(
    viewer: str, waiting: Sequence[tuple[RunRecord, ApprovalRecord]], runs: Sequence[RunRecord],
    *, displays: Mapping[str, ToolDisplay] | None = None, grants: Sequence[GrantRecord] = (),
) -> dict[str, Any]:
    """The Home tab: approvals waiting on the viewer, with working buttons, the grants in force
    that they made or that cover their runs (each with Revoke), and their recent runs.

    `displays` gives, per tool name, how to show it (description, argument order, secret names).
    Approve is offered only beside every argument in full, as on the channel card.
    """
    displays = displays or {}
    blocks: list[dict[str, Any]] = [header("Waiting on you")]
    if not waiting:
        blocks.append(section("Nothing is waiting for your approval."))
    for run, approval in waiting[:_HOME_APPROVALS]:
        display = displays.get(approval.tool, UNKNOWN_TOOL)
        shown = shown_arguments(run, approval, display, HOME_SECTIONS)
        about = f" ({untrusted(display.description, 150)})" if display.description else ""
        deciders = deciders_line(approval)
        blocks += [
            {"type": "divider"},
            section(f"*{safe(approval.tool, 64)}*{about} for {user(run.requester)}: {safe(run.goal, 200)}\n"
                    f"{shown.label}"),
            *shown.sections,
            context(f"key `{safe(approval.key, 120)}` · expires {slack_date(approval.expires_at)}"
                    f"{_waiting_progress(approval)}", *([deciders] if deciders else [])),
            actions(f"signoff.home.{clip(approval.approval_id, 200)}", shown.buttons),
        ]
    if len(waiting) > _HOME_APPROVALS:
        blocks.append(context(f"and {len(waiting) - _HOME_APPROVALS} more; see `/signoff list`"))
    blocks += _grant_blocks(grants, displays)
    blocks += [header("Your recent runs"), section(runs_text(runs[:_HOME_RUNS]))]
    assert len(blocks) <= MAX_VIEW_BLOCKS
    return {"type": "home", "blocks": blocks}


def _grant_blocks(grants: Sequence[GrantRecord], displays: Mapping[str, ToolDisplay]) -> list[dict[str, Any]]:
    """*Calls allowed without asking*: each grant in force, what it covers, and Revoke."""
    if not grants:
        return []
    blocks = [header("Calls allowed without asking")]
    for grant in grants[:_HOME_GRANTS]:
        blocks += [section(grant_text(grant, displays.get(grant.tool, UNKNOWN_TOOL))),
                   actions(f"signoff.grant.{clip(grant.grant_id, 200)}",
                           [button("Revoke", REVOKE_GRANT_ACTION, grant.grant_id, "danger")])]
    if len(grants) > _HOME_GRANTS:
        blocks.append(context(f"and {len(grants) - _HOME_GRANTS} more, the oldest; they end when they expire"))
    return blocks


def grant_text(grant: GrantRecord, display: ToolDisplay = UNKNOWN_TOOL) -> str:
    """One grant as App Home lists it: the tool and rule, which calls it covers, who made it and
    when, when it ends, and how often it was used."""
    same = argument_lines(grant.same, display)
    where = (f"in run `{safe(grant.run_id, 80)}`" if grant.scope == "run" else f"in any run of {user(grant.requester)}")
    alike = f" with the same {safe(people(list(grant.same)), 300)}" if grant.same else ""
    rule = f" under rule {_rule_name(grant.rule)}" if grant.rule else ""
    used = "not used yet" if grant.uses == 0 else f"used {counted(grant.uses, 'time')}"
    return clip(f"*{safe(grant.tool, 64)}*{rule}: calls {where}{alike}\n"
                + (f"`{safe(', '.join(same), 1200)}`\n" if same else "")
                + f"made by {user(grant.created_by)} {slack_date(grant.created_at)} · ends "
                  f"{slack_date(grant.expires_at)} · {used}", MAX_SECTION_TEXT)


# -- reminders, escalations and expiry ---------------------------------------------------------------


def reminder_message(approval: ApprovalRecord) -> Message:
    """In the card's thread: the request still waits, for whom, until when."""
    deciders = deciders_line(approval)
    who = f" for {deciders}" if deciders else ""
    text = (f":bell: *Reminder:* this request still waits{who}{_waiting_progress(approval)}; it expires "
            f"{slack_date(approval.expires_at)}.")
    return Message(_fallback(f"Reminder: {approval.tool} still waits for a decision"), [section(text)])


def reminder_dm(run: RunRecord, approval: ApprovalRecord) -> Message:
    """To each approver named by id: the request waits for their decision."""
    text = (f":bell: *Reminder:* `{safe(approval.tool, 64)}` for {user(run.requester)}'s run "
            f"`{safe(run.run_id, 80)}` waits for your decision; it expires {slack_date(approval.expires_at)}."
            f"{_card_link(approval)}")
    return Message(_fallback(f"Reminder: {approval.tool} waits for your decision"), [section(text)])


def escalation_message(approval: ApprovalRecord, added: Sequence[str]) -> Message:
    """In the card's thread: who the escalation added, and why."""
    text = (f":rotating_light: *Escalated:* nobody decided within {_escalated_after(approval)}, so "
            f"{people([user(i) for i in added]) or 'more people'} may decide it now; it expires "
            f"{slack_date(approval.expires_at)}.")
    return Message(_fallback(f"Escalated: {approval.tool} may now be decided by more people"), [section(text)])


def escalation_dm(run: RunRecord, approval: ApprovalRecord) -> Message:
    """To each person the escalation added: they may decide the request now."""
    rule = f" (rule {_rule_name(approval.rule)})" if approval.rule else ""
    text = (f":rotating_light: You may now decide `{safe(approval.tool, 64)}` for {user(run.requester)}'s run "
            f"`{safe(run.run_id, 80)}`: nobody decided within {_escalated_after(approval)}, so the approval "
            f"policy{rule} added you. It expires {slack_date(approval.expires_at)}.{_card_link(approval)}")
    return Message(_fallback(f"You may now decide {approval.tool}"), [section(text)])


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


def runs_text(runs: Sequence[RunRecord]) -> str:
    """One line per run: status, id, goal."""
    if not runs:
        return "You have no runs yet. Start one with `/signoff <goal>`."
    lines = [f"{_STATUS_EMOJI.get(r.status, '')} `{safe(r.run_id, 60)}` *{status_words(r.status)}*"
             f"{' (its stored state cannot be read; ask an operator)' if r.unreadable else ''} · "
             f"{safe(r.goal, 120)}" for r in runs]
    return clip_lines(lines, MAX_SECTION_TEXT)


def help_message() -> Message:
    text = (
        f"*{COMMAND} <goal>* start a run (side effects wait for an approval)\n"
        f"*{COMMAND} status [run]* where a run stands (without a run: your latest)\n"
        f"*{COMMAND} list* your recent runs and the approvals waiting on you\n"
        f"*{COMMAND} cancel [run]* stop a run (without a run: your latest unfinished one); nothing more is "
        "executed (a call already running finishes)\n"
        f"*{COMMAND} help* this text"
    )
    return Message("Signoff commands: /signoff <goal>, status [run], list, cancel [run], help", [section(text)])


def started_message(run: RunRecord) -> Message:
    """The ephemeral reply to `/signoff <goal>`: run id and budget."""
    text = (f"Started run `{safe(run.run_id, 80)}` with {_model(run.model)}.\n"
            f"Budget: {budget_limits(run.budget)}. Calls the approval policy asks about will wait for an approval.")
    return Message(_fallback(f"Started run {run.run_id}"), [section(text)])


def status_message(run: RunRecord, approval: ApprovalRecord | None = None) -> Message:
    """The reply to `/signoff status <run>`."""
    lines = [f"{_STATUS_EMOJI.get(run.status, '')} Run `{safe(run.run_id, 80)}` is *{status_words(run.status)}*",
             f">{safe(run.goal, _GOAL_CHARS)}",
             f"asked by {user(run.requester)} · model: {_model(run.model)}",
             f"usage: {budget_line(run.state)}"]
    if approval is not None and approval.status == "pending":
        lines.append(f"waiting for approval of `{safe(approval.tool, 64)}` until {slack_date(approval.expires_at)}"
                     f"{_waiting_progress(approval)}")
    if run.stop:
        lines.append(f"stopped: {_stop_reason(run, 300)}")
    if run.answer:
        lines.append(f"*Answer*\n{safe(run.answer, 1500)}")
    return Message(_fallback(f"Run {run.run_id}: {status_words(run.status)}"), [section("\n".join(lines))])


def list_message(runs: Sequence[RunRecord], waiting: Sequence[tuple[RunRecord, ApprovalRecord]]) -> Message:
    """The reply to `/signoff list`: my recent runs and the approvals waiting on me."""
    waiting_lines = [f"`{safe(a.tool, 64)}` for {user(r.requester)} · run `{safe(r.run_id, 60)}` · "
                     f"expires {slack_date(a.expires_at)}{_waiting_progress(a)}" for r, a in waiting]
    blocks = [section("*Waiting on you*\n" + (clip_lines(waiting_lines, 2800) if waiting_lines else "nothing")),
              section("*Your recent runs*\n" + runs_text(runs))]
    if waiting:
        blocks.append(context("Open the Signoff Home tab to approve or deny."))
    return Message(f"{counted(len(waiting), 'approval')} waiting on you; {counted(len(runs), 'recent run')}", blocks)
