"""Things in short, where a few lines or one are all that is shown: a tool's JSON result (a thread
reply) and an approval request (a notification). Pure: no I/O, no Slack; each surface formats the
parts it passes in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from signoff.bot.arguments import key_text, literal
from signoff.bot.words import counted

# -- tool results in short ------------------------------------------------------------------------

SUMMARY_LINES = 6
_SUMMARY_VALUE = 60
_SUMMARY_NAMES = 4


def result_summary(value: Any) -> list[str]:
    """A JSON result in at most `SUMMARY_LINES` lines: top-level keys with short values, list
    lengths, the start of long strings. Keys are sorted, as a stored result's are; values are shown
    as `bot.arguments.literal` shows them."""
    room = SUMMARY_LINES
    if isinstance(value, Mapping):
        names = sorted(value, key=str)
        shown = names if len(names) <= room else names[: room - 1]
        lines = [f"{_short(key_text(name), 40)}: {_brief(value[name])}" for name in shown]
        return lines + ([f"... and {counted(len(names) - len(shown), 'more key')}"] if len(shown) < len(names) else [])
    if isinstance(value, list | tuple):
        items = list(value)
        shown_items = items if len(items) <= room - 1 else items[: room - 2]
        lines = [counted(len(items), "item")] + [f"[{i}] {_brief(item)}" for i, item in enumerate(shown_items)]
        return lines + ([f"... and {len(items) - len(shown_items):,} more"] if len(shown_items) < len(items) else [])
    return [_brief(value)]


def _brief(value: Any) -> str:
    """One value in a few words: an object by its keys, a list by its length, a long string by its start."""
    match value:
        case Mapping():
            names = [_short(key_text(name), 24) for name in sorted(value, key=str)[:_SUMMARY_NAMES]]
            more = f", ... {len(value):,} keys" if len(value) > _SUMMARY_NAMES else ""
            return "{" + ", ".join(names) + more + "}"
        case list() | tuple():
            return counted(len(value), "item")
        case str() if len(value) > _SUMMARY_VALUE:
            return literal(value[:_SUMMARY_VALUE])[:-1] + f'..." ({len(value):,} characters)'
        case _:
            return _short(literal(value), _SUMMARY_VALUE)


# -- an approval request in one line ----------------------------------------------------------------

_SUMMARY_ARGUMENTS = 2
_SUMMARY_ARGUMENT_CHARS = 48


def call_summary(lines: Sequence[str]) -> str:
    """A call in short, from its argument lines (`bot.arguments.argument_lines`, secrets redacted):
    the first two, each cut short, and how many more, e.g. `to: "ada@example.com", subject: "Your
    refund", 1 more`."""
    shown = [_short(line, _SUMMARY_ARGUMENT_CHARS) for line in lines[:_SUMMARY_ARGUMENTS]]
    rest = len(lines) - len(shown)
    return ", ".join(shown + ([f"{rest:,} more"] if rest else []))


def approval_request_line(tool: str, summary: str, requester: str, run_id: str, expires: str,
                          edited_by: str | None = None) -> str:
    """An approval request where one line is all that is shown (a notification): the tool, the call
    in short (`call_summary`), whose run asks, and until when. Each part as its surface formats it."""
    about = f" ({summary})" if summary else ""
    edited = f", edited by {edited_by}" if edited_by else ""
    return f"Approval needed: {tool}{about}, requested by {requester} in run {run_id}{edited}; expires {expires}"


def batch_request_line(waiting: int, tools: Sequence[str], requester: str, run_id: str) -> str:
    """A card of a turn's several calls where one line is all that is shown: how many of them still
    wait, which tools, and whose run asks. Each part as its surface formats it."""
    if not waiting:
        return f"Decided: {len(tools)} calls for run {run_id}"
    return (f"Approval needed: {waiting} of {len(tools)} calls ({', '.join(dict.fromkeys(tools))}), "
            f"requested by {requester} in run {run_id}")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
