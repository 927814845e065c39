"""A tool call's outcome in a run's thread: refused by a rule, failed, marked done by a person, or
what it returned (summed up when long); and the result in full, behind *View full result*. Pure:
records in, messages and a modal out. `messages.tool_result_message` picks which one an entry is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from signoff.bot.arguments import key_text, literal
from signoff.bot.slack.argument_blocks import MODAL_SECTIONS, code_section
from signoff.bot.slack.blocks import (
    MAX_FALLBACK,
    MAX_MODAL_TITLE,
    MAX_VIEW_BLOCKS,
    RESULT_MODAL,
    VIEW_RESULT_ACTION,
    Message,
    actions,
    button,
    clip,
    code,
    code_fits,
    code_sections,
    context,
    fallback_text,
    json_text,
    rule_name,
    safe,
    section,
    slack_time,
    user,
)
from signoff.bot.summaries import result_summary
from signoff.bot.words import counted, grant_uses
from signoff.runtime.judging import denied_by_rule
from signoff.runtime.records import GrantRecord, RunRecord
from signoff.runtime.state import DEFAULT_REDACT_KEYS, Redacted, redact

_RESULT_CHARS = 2400
_SHORT_RESULT = 300
"""A JSON result longer than this (as shown) is summed up in the thread, in full one click away."""


def refused_message(entry: Mapping[str, Any], rule: str) -> Message:
    """A call the policy said no to before anything ran: a refusal by rule, not a tool that failed."""
    reason = str(entry["error"]).removeprefix(denied_by_rule(rule, ""))
    body = f":no_entry: {_called(entry)} refused by rule {rule_name(rule)}: {safe(reason, _RESULT_CHARS)}"
    return Message(fallback_text(f"{entry.get('tool')} refused by rule {rule}: {reason}"), [section(body)])


def failed_message(entry: Mapping[str, Any]) -> Message:
    """A call that ran and failed, with its error."""
    kind = safe(entry.get("error_kind") or "error", 30)
    body = f":x: {_called(entry)} {kind}:\n{code(entry['error'], _RESULT_CHARS)}"
    return Message(fallback_text(f"{entry.get('tool')} failed: {entry['error']}"), [section(body)])


def returned_message(run: RunRecord, entry: Mapping[str, Any], rule: str | None, grant: GrantRecord | None,
                     secret_names: frozenset[str]) -> Message:
    """A call that ran and returned, `secret_names` redacted, and what let it run unasked (`rule`, or
    the `grant` its entry names); a long JSON result is summed up, with *View full result*."""
    shown = redact(entry.get("result"), secret_names)
    rendered = shown if isinstance(shown, str) else json_text(shown)
    granted = _granted_words(entry, grant)
    ran = (f"ran — allowed by rule {rule_name(rule)}" if rule is not None
           else f"ran — {granted}" if granted else "returned")
    if isinstance(entry.get("edited"), str):
        ran += " (with the arguments a person edited)"
    summed_up = isinstance(shown, dict | list) and len(rendered) > _SHORT_RESULT
    if summed_up:
        summary = "\n".join(result_summary(redact(entry.get("result"), secret_names, mask=Redacted.of)))
        body = f":white_check_mark: {_called(entry)} {ran}, in short:\n{code(summary, _RESULT_CHARS)}"
    else:
        body = f":white_check_mark: {_called(entry)} {ran}:\n{code(rendered, _RESULT_CHARS)}"
    cut = not code_fits(rendered, _RESULT_CHARS)
    more: list[dict[str, Any]] = []
    if (summed_up or cut) and isinstance(entry.get("step"), int):
        more = [actions("signoff.result", [button("View full result", VIEW_RESULT_ACTION,
                                                  result_value(run.run_id, entry["step"]))])]
    fallback = (f"{entry.get('tool')} ran (allowed by rule {rule}) and returned a result" if rule is not None
                else f"{entry.get('tool')} ran (allowed by {grant.created_by if grant else 'a'} grant) and "
                     "returned a result" if granted else f"{entry.get('tool')} returned a result")
    return Message(fallback_text(fallback), [section(body), *more])


def marked_done_message(entry: Mapping[str, Any], request: Mapping[str, Any],
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


def _called(entry: Mapping[str, Any]) -> str:
    """The call an entry is about, as its thread names it: `` `issue_refund` (step 3) ``."""
    return f"`{safe(entry.get('tool', '?'), 64)}` (step {entry.get('step', '?')})"


def _granted_words(entry: Mapping[str, Any], grant: GrantRecord | None) -> str | None:
    """`allowed by @lee's grant, 14:05, 2 of its uses` for a call a grant let run unasked; None otherwise."""
    if not isinstance(entry.get("grant"), str):
        return None
    if grant is None or grant.grant_id != entry["grant"]:
        return f"allowed by grant `{safe(entry['grant'], 80)}`"
    return f"allowed by {user(grant.created_by)}'s grant, {slack_time(grant.created_at)}, {grant_uses(grant.uses)}"


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
