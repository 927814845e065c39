"""The App Home tab: the approvals waiting on the viewer, with working buttons; the grants in force,
each with Revoke; and the viewer's recent runs. Pure: records in, a view out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from signoff.bot.arguments import UNKNOWN_TOOL, ToolDisplay, argument_lines
from signoff.bot.slack.approval_cards import deciders_line, waiting_progress
from signoff.bot.slack.argument_blocks import HOME_SECTIONS, shown_arguments
from signoff.bot.slack.blocks import (
    MAX_SECTION_TEXT,
    MAX_VIEW_BLOCKS,
    REVOKE_GRANT_ACTION,
    STATUS_EMOJI,
    actions,
    button,
    clip,
    clip_lines,
    context,
    header,
    rule_name,
    safe,
    section,
    slack_date,
    untrusted,
    user,
)
from signoff.bot.words import counted, people, status_words
from signoff.runtime.records import ApprovalRecord, GrantRecord, RunRecord

_HOME_APPROVALS = 15
_HOME_RUNS = 10
_HOME_GRANTS = 8


def home_view(
    viewer: str, waiting: Sequence[tuple[RunRecord, ApprovalRecord]], runs: Sequence[RunRecord],
    *, displays: Mapping[str, ToolDisplay] | None = None, grants: Sequence[GrantRecord] = (),
    console: str | None = None,
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
        shown = shown_arguments(run, approval, display, HOME_SECTIONS, console=console)
        about = f" ({untrusted(display.description, 150)})" if display.description else ""
        deciders = deciders_line(approval)
        blocks += [
            {"type": "divider"},
            section(f"*{safe(approval.tool, 64)}*{about} for {user(run.requester)}: {safe(run.goal, 200)}\n"
                    f"{shown.label}"),
            *shown.sections,
            context(f"key `{safe(approval.key, 120)}` · expires {slack_date(approval.expires_at)}"
                    f"{waiting_progress(approval)}", *([deciders] if deciders else [])),
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
    rule = f" under rule {rule_name(grant.rule)}" if grant.rule else ""
    used = "not used yet" if grant.uses == 0 else f"used {counted(grant.uses, 'time')}"
    return clip(f"*{safe(grant.tool, 64)}*{rule}: calls {where}{alike}\n"
                + (f"`{safe(', '.join(same), 1200)}`\n" if same else "")
                + f"made by {user(grant.created_by)} {slack_date(grant.created_at)} · ends "
                  f"{slack_date(grant.expires_at)} · {used}", MAX_SECTION_TEXT)


def runs_text(runs: Sequence[RunRecord]) -> str:
    """One line per run: status, id, goal."""
    if not runs:
        return "You have no runs yet. Start one with `/signoff <goal>`."
    lines = [f"{STATUS_EMOJI.get(r.status, '')} `{safe(r.run_id, 60)}` *{status_words(r.status)}*"
             f"{' (its stored state cannot be read; ask an operator)' if r.unreadable else ''} · "
             f"{safe(r.goal, 120)}" for r in runs]
    return clip_lines(lines, MAX_SECTION_TEXT)
