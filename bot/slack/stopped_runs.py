"""The pieces of a stopped run's notice: its title, the buttons that fit its status, the call whose
outcome is unknown, and its last steps. `messages.stopped_message` puts them together. Pure:
records in, blocks and text out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from signoff.bot.arguments import ToolDisplay, argument_lines
from signoff.bot.slack.argument_blocks import code_section
from signoff.bot.slack.blocks import (
    CLOSE_ACTION,
    EXTEND_ACTION,
    RECONCILE_ABORT_ACTION,
    RECONCILE_DONE_ACTION,
    RECONCILE_RETRY_ACTION,
    REQUEST_AGAIN_ACTION,
    RETRY_ACTION,
    button,
    clip,
    code_sections,
    safe,
    section,
)
from signoff.bot.slack.payloads import run_value
from signoff.bot.words import extension_words
from signoff.runtime.caller_runs import caller_call
from signoff.runtime.records import RunRecord

RECONCILE_SECTIONS = 2
"""Code sections of a call's arguments a reconciliation notice holds, as an approval card does."""


def stop_title(run: RunRecord) -> str:
    """What a stopped run's notice opens with, by its status."""
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


def stop_buttons(run: RunRecord, extend_steps: int | None) -> list[dict[str, Any]]:
    """The buttons that fit a stopped run's status; Extend says what it adds (`extend_steps`)."""
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
            # A call its caller runs is never run again by Signoff: whether it took effect is all to say.
            retry = [] if caller_call(run) is not None else [button("Retry", RECONCILE_RETRY_ACTION, value)]
            return [button("Mark done", RECONCILE_DONE_ACTION, value, "primary"), *retry,
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


def unknown_outcome_call(run: RunRecord, display: ToolDisplay | None) -> tuple[list[dict[str, Any]], bool]:
    """The arguments of the call whose outcome is unknown, as an approval card shows them (`display`
    is its tool's), and whether Retry may be offered: it runs the call again, so only beside every
    argument in full."""
    arguments = argument_lines((run.state.get("pending") or {}).get("args", {}), display)
    sections = code_sections(arguments, RECONCILE_SECTIONS)
    if sections is not None:
        return [section(f"*The call's arguments* ({len(arguments)}, one a line, in full)"),
                *(code_section(s) for s in sections)], True
    return [section(f"*The call's arguments* ({len(arguments)}) are too long to show here, so Retry is "
                    f"not offered in Slack: `signoff runs resume {safe(run.run_id, 80)}` shows them all "
                    "and can retry it.")], False
