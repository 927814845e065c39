"""An approval's arguments in Block Kit: whole where they fit; else a short form that says so and
offers no Approve, and the modal that holds them all with Approve (`edit_form` has the modal that
edits them). Pure: records in, dicts out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from signoff.bot.arguments import ToolDisplay, argument_lines, argument_pairs
from signoff.bot.slack.approval_buttons import (
    approval_value,
    approve_buttons,
    deny_button,
    edit_button,
    step_up_words,
)
from signoff.bot.slack.blocks import (
    APPROVAL_BLOCK,
    ARGS_MODAL,
    MAX_MODAL_TITLE,
    MAX_PRIVATE_METADATA,
    MAX_SECTION_TEXT,
    MAX_VIEW_BLOCKS,
    VIEW_ARGS_ACTION,
    actions,
    budget_line,
    button,
    clip,
    code,
    code_sections,
    context,
    escape,
    model_says,
    safe,
    section,
    slack_date,
    untrusted,
    user,
)
from signoff.bot.slack.edit_form import editable
from signoff.bot.words import approval_preview, counted, model_words, preview_text
from signoff.runtime.digests import batch_place
from signoff.runtime.records import ApprovalRecord, RunRecord

CARD_SECTIONS = 2
"""Code sections of arguments a channel card holds; with the rest it stays under Slack's ~12k characters."""
HOME_SECTIONS = 1
"""Per approval in App Home, which lists up to 15 of them in one 100-block view."""
BATCH_SECTIONS = 1
"""Code sections of each call's arguments on a card of several calls (each is Approved beside them in full)."""
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


def approvable_in(approval: ApprovalRecord, display: ToolDisplay, room: int) -> bool:
    """Whether a surface with `room` code sections offers Approve for `approval`: only beside every
    argument in full. A click is taken only where the surface it came from could offer it."""
    return code_sections(argument_lines(approval.args, display), room) is not None


def shown_arguments(run: RunRecord, approval: ApprovalRecord, display: ToolDisplay, room: int, *,
                    console: str | None = None) -> ShownArguments:
    """The arguments in at most `room` code sections, or the short form, with its buttons.

    Approve is offered only beside every argument in full. A short form offers *View full
    arguments* (the modal, with Approve) if the modal holds them, and otherwise only Deny. A rule
    with `step_up` gets a link to the approval's page in the web console (`console`) instead of Approve.
    """
    lines = argument_lines(approval.args, display)
    deny = deny_button(approval)
    # Edit opens a form of the values as they are, which Slack's inputs hold only up to a size.
    edit = [edit_button(approval)] if approval.status == "pending" and editable(approval.args, display) else []
    full = code_sections(lines, room)
    if full is not None:
        label = f"*Arguments* ({len(lines)}, one a line, in full)" if lines else "*Arguments*: none"
        stepped = step_up_words(approval) if approval.status == "pending" else None
        label += f"\n{stepped}" if stepped else ""
        approve = approve_buttons(approval, tool_confirms=display.confirm, console=console)
        return ShownArguments(label, [code_section(s) for s in full], [*approve, deny, *edit], True)
    size = f"*Arguments* ({len(lines)}): {sum(map(len, lines)):,} characters, too long to show in full here"
    if approval.status != "pending":
        label = f"{size}; `signoff runs show {safe(run.run_id, 80)} --json` has them in full."
        buttons = []
    elif code_sections(lines, MODAL_SECTIONS) is not None:
        label = (f"{size}, so Approve is not offered on this short form. *View full arguments* shows every "
                 "one of them, with Approve.")
        buttons = [button("View full arguments", VIEW_ARGS_ACTION, approval_value(approval), "primary"), deny, *edit]
    else:
        label = f"{size}. {too_long_for_slack(run.run_id)}"
        buttons = [deny, *edit]
    return ShownArguments(label, [code_section(_short_form(approval, display))], buttons, False)


CARD_PREVIEW_CHARS = 1200
"""How much of a preview a card shows; *View full arguments* shows all of it."""
BATCH_PREVIEW_CHARS = 400
"""How much of each call's preview a card of several calls shows."""


def preview_blocks(preview: Mapping[str, Any], room: int | None) -> list[dict[str, Any]]:
    """What the call will do, as its preview said (`room`: characters shown, None: all of it, in as
    many sections as it takes), and what an earlier approval showed if the world changed since."""
    if preview.get("digest") is None:
        return [section(f":warning: *No preview*: {untrusted(preview.get('error') or 'none was taken', 300)}. Approve "
                        "only if the arguments alone say what it will do.")]
    blocks = []
    if preview.get("was") is not None:
        blocks.append(section(":rotating_light: *The world changed since this call was approved*, so that "
                              "approval was void and nothing ran. Its preview then was:\n"
                              + code(preview_text(preview["was"]), min(room or 1500, 1500))))
    text = preview_text(preview.get("shown"))
    label = "*Preview*: what it will do, as its tool says now (the approval is bound to it)"
    if room is not None and len(text) > room:
        return [*blocks, section(f"{label}; the first {room:,} of {len(text):,} characters, *View full arguments* "
                                 f"has it all:\n" + code(text[:room], room + 8))]
    chunk = MAX_SECTION_TEXT - 300
    parts = [text[i:i + chunk] for i in range(0, len(text), chunk)] or [""]
    return [*blocks, section(f"{label}:\n" + code(parts[0], chunk + 8)),
            *(section(code(part, chunk + 8)) for part in parts[1:])]


def full_preview_button(run: RunRecord, approval: ApprovalRecord, shown: ShownArguments) -> list[dict[str, Any]]:
    """*View full arguments*, beside a card that cuts the call's preview short and has no such
    button already: the modal shows the preview whole."""
    preview = approval_preview(run, approval)
    if preview is None or approval.status != "pending" or any(b["action_id"] == VIEW_ARGS_ACTION for b in shown.buttons):
        return []
    room = BATCH_PREVIEW_CHARS if batch_place(approval.key) is not None else CARD_PREVIEW_CHARS
    if len(preview_text(preview.get("shown"))) <= room:
        return []
    return [button("View full preview", VIEW_ARGS_ACTION, approval_value(approval))]


def too_long_for_slack(run_id: str) -> str:
    """What an approver is told when not even a modal holds the arguments."""
    return ("They are too long even for a Slack dialog, so Slack offers no Approve. To approve, read them "
            f"in a terminal: `signoff runs resume {safe(run_id, 80)}`.")


def not_editable_in_slack(run_id: str) -> str:
    """What someone who clicks Edit is told when Slack's inputs cannot hold the arguments."""
    return ("These arguments do not fit Slack's form (a value over 3,000 characters, too many of them, or a "
            f"tool not loaded here). To edit them, use a terminal: `signoff runs resume {safe(run_id, 80)}`.")


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


def arguments_modal(run: RunRecord, approval: ApprovalRecord, display: ToolDisplay, *,
                    console: str | None = None) -> dict[str, Any] | None:
    """Every argument in full with Approve, or None if even a modal cannot hold them; the model's
    words beside the call too, when `run` carries its history."""
    lines = argument_lines(approval.args, display)
    sections = code_sections(lines, MODAL_SECTIONS)
    if sections is None:
        return None
    about = f"\n{untrusted(display.description, 300)}" if display.description else ""
    said = model_words(run.state.get("history") or (), approval.step)
    heading = (f"*Approve `{safe(approval.tool, 64)}`?* Asked by {user(run.requester)}, key "
               f"`{safe(approval.key, 120)}`{about}\n>{safe(run.goal, 600)}\n"
               + (f"{model_says(said)}\n" if said else "")
               + f"*Arguments* ({len(lines)}, one a line, in full)")
    preview = approval_preview(run, approval)
    approve = approve_buttons(approval, tool_confirms=display.confirm, console=console)
    blocks = [section(heading), *(code_section(s) for s in sections), *(preview_blocks(preview, None) if preview else []),
              context(f"expires {slack_date(approval.expires_at)} · budget used: {budget_line(run.state)}"),
              *([actions(APPROVAL_BLOCK, approve)] if approve else [])]
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
