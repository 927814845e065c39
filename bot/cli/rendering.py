"""Runs as terminal text: one-line summaries, tool steps and the approval card. Pure: data in, ASCII out."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from signoff.bot.arguments import ToolDisplay, argument_lines
from signoff.bot.untrusted import flat
from signoff.bot.words import (
    approval_preview,
    edited_changes,
    grant_offer,
    plain_budget_line,
    preview_text,
    similar_words,
    who_decides,
)
from signoff.runtime.durations import spoken
from signoff.runtime.judging import denied_by_rule
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.state import redact
from signoff.tools.base import Tool

_WIDTH = 78
_RESULT_CHARS = 300
_SAID = "|   > "
"""The gutter of what a tool says over several lines (a preview), so no line of it passes for an argument."""


def one_line(text: Any, limit: int) -> str:
    """`text` as `untrusted.flat` shows it (one line, no escape sequence a terminal would act on), cut to `limit`."""
    shown = flat(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def find_call(history: Sequence[Mapping[str, Any]], result: Mapping[str, Any],
              before: int | None = None) -> Mapping[str, Any] | None:
    """The assistant entry that asked for the call a tool entry answers, among the entries before
    index `before` (by default, all of them).

    Searched backwards, and no further than the result's step: a call comes shortly before its
    result, so finding it costs the same however long the run."""
    step = result.get("step")
    for index in range(len(history) if before is None else before, 0, -1):
        entry = history[index - 1]
        if isinstance(step, int) and isinstance(entry.get("step"), int) and entry["step"] < step:
            break
        if (entry.get("role") == "assistant" and "tool" in entry and entry.get("step") == step
                and entry.get("call_id") == result.get("call_id")):
            return entry
    return None


def step_lines(call: Mapping[str, Any] | None, entry: Mapping[str, Any], secret_keys: frozenset[str]) -> list[str]:
    """`step 2  lookup_orders {...}` then `-> result` or `x error`, secrets redacted; a call the
    approval policy decided without a person says which rule allowed or refused it."""
    lines = []
    if call is not None and call.get("text"):
        lines.append(f"  step {entry.get('step')}  model: {one_line(call['text'], 200)}")
    args = as_text(redact(call.get("args", {}), secret_keys)) if call is not None else ""
    edited = entry.get("edited")
    proposed = " (as the model proposed it)" if isinstance(edited, str) else ""
    lines.append(f"  step {entry.get('step')}  {entry.get('tool')} {one_line(args, 200)}{proposed}")
    if isinstance(edited, str):  # what the model is told, up to the advice that is meant for it
        lines.append(f"          {one_line(edited.split('; it ran as changed')[0], _RESULT_CHARS)}")
    rule = entry.get("rule")
    if entry.get("error_kind") == "denied_by_rule" and isinstance(rule, str):
        reason = str(entry.get("error", "")).removeprefix(denied_by_rule(rule, ""))
        lines.append(f"          x refused by rule {rule}: {one_line(reason, _RESULT_CHARS)}")
    elif "error" in entry:
        lines.append(f"          x {one_line(entry['error'], _RESULT_CHARS)}")
    else:
        if isinstance(rule, str):
            lines.append(f"          allowed by rule {rule}")
        if isinstance(entry.get("grant"), str):
            lines.append(f"          allowed by grant {entry['grant']} (approve + allow similar)")
        lines.append(f"          -> {one_line(as_text(redact(entry.get('result'), secret_keys)), _RESULT_CHARS)}")
    return lines


def malformed_lines(history: Iterable[Mapping[str, Any]], step: int) -> list[str]:
    """A reply the loop could not use (neither a tool call nor an answer), and what the model was
    told about it: `step 2  malformed reply: ...` then `x malformed decision: ...`."""
    entries = [e for e in history if e.get("step") == step]
    reply = next((e["malformed"] for e in entries if e.get("role") == "assistant" and "malformed" in e), "")
    told = next((e.get("error", "") for e in entries if e.get("role") == "runtime"), "")
    return [f"  step {step}  malformed reply: {one_line(reply, 200)}",
            f"          x {one_line(told or 'neither a tool call nor an answer', _RESULT_CHARS)} (the model is told)"]


def approval_card(run: RunRecord, approval: ApprovalRecord, tool: Tool | None, secret_keys: frozenset[str],
                  now: datetime) -> str:
    """The approval request as Slack shows it: goal, requester, tool, arguments, key, budget, expiry,
    and who decides by which rule.

    The arguments are `argument_lines`, the same lines every Slack surface shows, never shortened.
    """
    description = one_line(tool.description, 300) if tool is not None else "(tool not loaded here)"
    call = next((e for e in run.state.get("history", []) if e.get("role") == "assistant"
                 and e.get("step") == approval.step and "tool" in e), None)
    said = [("Model says", one_line(call["text"], 300))] if call is not None and call.get("text") else []
    above = [("Goal", one_line(run.goal, 300)), ("Requested by", run.requester), *said,
             ("Tool", f"{approval.tool}: {description}")]
    lines = [f"+-- Approval needed: {approval.tool} ".ljust(_WIDTH, "-")]
    lines += [f"| {name + ':':<14}{value}" for name, value in above]
    lines.append("| Arguments:")
    lines += ["|   " + line for line in argument_lines(approval.args, ToolDisplay.of(tool, secret_keys)) or ["(none)"]]
    lines += _changed_lines(run, approval)
    lines += [f"| {name + ':':<14}{value}" for name, value in _card_footer(run, approval, now)]
    lines.append("+" + "-" * (_WIDTH - 1))
    return "\n".join(line.rstrip() for line in lines)


def _changed_lines(run: RunRecord, approval: ApprovalRecord) -> list[str]:
    """What the card shows of the call beyond its arguments: who edited it, and its preview."""
    lines = []
    edited = edited_changes(run.state.get("pending"), approval)
    if edited is not None:
        lines.append(f"| Edited by {edited.get('by') or 'someone'}, from what the model proposed:")
        lines += ["|   " + one_line(change, _WIDTH * 2) for change in edited.get("changes") or ()]
    preview = approval_preview(run, approval)
    if preview is not None and preview.get("digest") is None:
        lines.append(f"| No preview:   {one_line(str(preview.get('error') or 'none was taken'), 300)}")
    elif preview is not None:
        if preview.get("was") is not None:
            lines.append("| The world changed since this call was approved, so that approval was void and nothing")
            lines.append("| ran. Its preview then was:")
            lines += [_SAID + line for line in preview_text(preview["was"]).splitlines()[:40]]
        lines.append("| Preview (what it will do, as its tool says now; the approval is bound to it):")
        lines += [_SAID + line for line in preview_text(preview.get("shown")).splitlines()]
    return lines


def _card_footer(run: RunRecord, approval: ApprovalRecord, now: datetime) -> list[tuple[str, str]]:
    """The card's last fields: key, budget, expiry, who decides, and the grant the rule offers."""
    below = [
        ("Key", approval.key),
        ("Budget used", plain_budget_line(run.state)),
        ("Expires", f"{approval.expires_at:%Y-%m-%d %H:%M:%S} UTC ({until(approval.expires_at, now)})"),
    ]
    if approval.asked is not None:  # None: proposed before Signoff had approval policies
        below.append(("Who decides", deciders(approval)))
    offer = grant_offer(approval.asked)
    if offer is not None:
        below.append(("Grant", f"s approves and lets {similar_words(offer)} run unasked for "
                               f"{spoken(offer['for_seconds'])}"))
    return below


def deciders(approval: ApprovalRecord) -> str:
    """Who decides `approval` and by which rule, as the person at the keyboard reads it."""
    text = who_decides(approval.asked) + ("" if approval.rule else " (the policy's defaults)")
    if approval.quorum > 1:
        text += "; you count as one, the others approve in Slack"
    if (approval.asked or {}).get("confirm"):
        text += "; approving asks you to confirm"
    return text


def until(moment: datetime, now: datetime) -> str:
    seconds = int((moment - now).total_seconds())
    if seconds <= 0:
        return "expired"
    hours, rest = divmod(seconds, 3600)
    minutes = rest // 60
    if hours:
        return f"in {hours}h{minutes:02d}m"
    return f"in {minutes}m" if minutes else f"in {seconds}s"
