"""An approval's arguments in Block Kit: whole where they fit; else a short form that says so and
offers no Approve, and the modal that holds them all with Approve. Pure: records in, dicts out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from signoff.bot.arguments import ToolDisplay, argument_lines, argument_pairs
from signoff.bot.slack.blocks import (
    APPROVAL_BLOCK,
    ARGS_MODAL,
    MAX_MODAL_TITLE,
    MAX_PRIVATE_METADATA,
    MAX_SECTION_TEXT,
    MAX_VIEW_BLOCKS,
    VIEW_ARGS_ACTION,
    actions,
    approval_value,
    approve_button,
    budget_line,
    button,
    clip,
    code_sections,
    context,
    deny_button,
    escape,
    model_says,
    safe,
    section,
    slack_date,
    user,
)
from signoff.bot.words import counted, model_words
from signoff.runtime.records import ApprovalRecord, RunRecord

CARD_SECTIONS = 2
"""Code sections of arguments a channel card holds; with the rest it stays under Slack's ~12k characters."""
HOME_SECTIONS = 1
"""Per approval in App Home, which lists up to 15 of them in one 100-block view."""
MODAL_SECTIONS = MAX_VIEW_BLOCKS - 3
"""The modal's own blocks: what is asked, the expiry, the Approve button."""
_SHORT_VALUE = 300
"""A value longer than this (escaped) is left out of the short form and named with its size."""


@dataclass(frozen=True)
class ShownArguments:
    """How one surface shows an approval's arguments, and the decision buttons that go with that."""

    label: str
    """An mrkdwn line: how many arguments, and whether they are all here in full."""
    sections: list[dict[str, Any]]
    buttons: list[dict[str, Any]]
    whole: bool


def shown_arguments(run: RunRecord, approval: ApprovalRecord, display: ToolDisplay, room: int) -> ShownArguments:
    """The arguments in at most `room` code sections, or the short form, with its buttons.

    Approve is offered only beside every argument in full. A short form offers *View full
    arguments* (the modal, with Approve) if the modal holds them, and otherwise only Deny.
    """
    lines = argument_lines(approval.args, display)
    deny = deny_button(approval)
    full = code_sections(lines, room)
    if full is not None:
        label = f"*Arguments* ({len(lines)}, one a line, in full)" if lines else "*Arguments*: none"
        approve = approve_button(approval, tool_confirms=display.confirm)
        return ShownArguments(label, [code_section(s) for s in full], [approve, deny], True)
    size = f"*Arguments* ({len(lines)}): {sum(map(len, lines)):,} characters, too long to show in full here"
    if approval.status != "pending":
        label = f"{size}; `signoff runs show {safe(run.run_id, 80)} --json` has them in full."
        buttons = []
    elif code_sections(lines, MODAL_SECTIONS) is not None:
        label = (f"{size}, so Approve is not offered on this short form. *View full arguments* shows every "
                 "one of them, with Approve.")
        buttons = [button("View full arguments", VIEW_ARGS_ACTION, approval_value(approval), "primary"), deny]
    else:
        label = f"{size}. {too_long_for_slack(run.run_id)}"
        buttons = [deny]
    return ShownArguments(label, [code_section(_short_form(approval, display))], buttons, False)


def too_long_for_slack(run_id: str) -> str:
    """What an approver is told when not even a modal holds the arguments."""
    return ("They are too long even for a Slack dialog, so Slack offers no Approve. To approve, read them "
            f"in a terminal: `signoff runs resume {safe(run_id, 80)}`.")


def _short_form(approval: ApprovalRecord, display: ToolDisplay) -> str:
    """Whole argument lines that are short; the others named with their size, never cut."""
    room = MAX_SECTION_TEXT - 100
    lines: list[str] = []
    pairs = argument_pairs(approval.args, display)
    for index, (name, value) in enumerate(pairs):
        line = f"{escape(name)}: {escape(value)}"
        if len(line) > _SHORT_VALUE:
            # Bare words in parentheses: no value renders like that (strings are quoted), so this
            # cannot be read as the argument's value.
            shown = escape(name) if len(escape(name)) <= _SHORT_VALUE else f"(a name of {len(name):,} characters)"
            line = f"{shown}: (not shown here: {len(value):,} characters)"
        if sum(len(x) + 1 for x in lines) + len(line) > room:
            lines.append(f"(and {counted(len(pairs) - index, 'more argument')}, not shown here)")
            break
        lines.append(line)
    return "```\n" + "\n".join(lines) + "\n```"


def code_section(text: str) -> dict[str, Any]:
    """A section holding one of `code_sections`' blocks, shown as it is."""
    block = section(text)
    block["text"]["verbatim"] = True  # no auto-linking of names, channels or URLs inside the arguments
    return block


def arguments_modal(run: RunRecord, approval: ApprovalRecord, display: ToolDisplay) -> dict[str, Any] | None:
    """Every argument in full with Approve, or None if even a modal cannot hold them; the model's
    words beside the call too, when `run` carries its history."""
    lines = argument_lines(approval.args, display)
    sections = code_sections(lines, MODAL_SECTIONS)
    if sections is None:
        return None
    about = f"\n{safe(display.description, 300)}" if display.description else ""
    said = model_words(run.state.get("history") or (), approval.step)
    heading = (f"*Approve `{safe(approval.tool, 64)}`?* Asked by {user(run.requester)}, key "
               f"`{safe(approval.key, 120)}`{about}\n>{safe(run.goal, 600)}\n"
               + (f"{model_says(said)}\n" if said else "")
               + f"*Arguments* ({len(lines)}, one a line, in full)")
    blocks = [section(heading), *(code_section(s) for s in sections),
              context(f"expires {slack_date(approval.expires_at)} · budget used: {budget_line(run.state)}"),
              actions(APPROVAL_BLOCK, [approve_button(approval, tool_confirms=display.confirm)])]
    return _modal(approval, blocks)


def outcome_modal(text: str) -> dict[str, Any]:
    """The full-arguments modal after a click on its Approve: what came of it (`text` is safe mrkdwn)."""
    return {"type": "modal", "callback_id": ARGS_MODAL, "title": {"type": "plain_text", "text": "Approval"},
            "close": {"type": "plain_text", "text": "Close"}, "blocks": [section(clip(text, MAX_SECTION_TEXT))]}


def _modal(approval: ApprovalRecord, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    metadata = json.dumps({"approval": approval.approval_id, "digest": approval.digest})
    assert len(metadata) <= MAX_PRIVATE_METADATA and len(blocks) <= MAX_VIEW_BLOCKS
    return {"type": "modal", "callback_id": ARGS_MODAL, "private_metadata": metadata,
            "title": {"type": "plain_text", "text": clip(f"Approve {approval.tool}?", MAX_MODAL_TITLE)},
            "close": {"type": "plain_text", "text": "Close"}, "blocks": blocks}
