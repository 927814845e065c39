"""What `/signoff` answers: help, a started run, where a run stands, and my runs and the approvals
waiting on me. Pure: records in, messages out."""

from __future__ import annotations

from collections.abc import Sequence

from signoff.bot.slack.approval_cards import waiting_progress
from signoff.bot.slack.blocks import (
    COMMAND,
    GOAL_CHARS,
    STATUS_EMOJI,
    Message,
    budget_limits,
    budget_line,
    clip_lines,
    context,
    fallback_text,
    model_name,
    safe,
    section,
    slack_date,
    stop_reason,
    user,
)
from signoff.bot.slack.home_tab import runs_text
from signoff.bot.words import counted, status_words
from signoff.runtime.records import ApprovalRecord, RunRecord


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
    text = (f"Started run `{safe(run.run_id, 80)}` with {model_name(run.model)}.\n"
            f"Budget: {budget_limits(run.budget)}. Calls the approval policy asks about will wait for an approval.")
    return Message(fallback_text(f"Started run {run.run_id}"), [section(text)])


def status_message(run: RunRecord, approval: ApprovalRecord | None = None) -> Message:
    """The reply to `/signoff status <run>`."""
    lines = [f"{STATUS_EMOJI.get(run.status, '')} Run `{safe(run.run_id, 80)}` is *{status_words(run.status)}*",
             f">{safe(run.goal, GOAL_CHARS)}",
             f"asked by {user(run.requester)} · model: {model_name(run.model)}",
             f"usage: {budget_line(run.state)}"]
    if approval is not None and approval.status == "pending":
        lines.append(f"waiting for approval of `{safe(approval.tool, 64)}` until {slack_date(approval.expires_at)}"
                     f"{waiting_progress(approval)}")
    if run.stop:
        lines.append(f"stopped: {stop_reason(run, 300)}")
    if run.answer:
        lines.append(f"*Answer*\n{safe(run.answer, 1500)}")
    return Message(fallback_text(f"Run {run.run_id}: {status_words(run.status)}"), [section("\n".join(lines))])


def list_message(runs: Sequence[RunRecord], waiting: Sequence[tuple[RunRecord, ApprovalRecord]]) -> Message:
    """The reply to `/signoff list`: my recent runs and the approvals waiting on me."""
    waiting_lines = [f"`{safe(a.tool, 64)}` for {user(r.requester)} · run `{safe(r.run_id, 60)}` · "
                     f"expires {slack_date(a.expires_at)}{waiting_progress(a)}" for r, a in waiting]
    blocks = [section("*Waiting on you*\n" + (clip_lines(waiting_lines, 2800) if waiting_lines else "nothing")),
              section("*Your recent runs*\n" + runs_text(runs))]
    if waiting:
        blocks.append(context("Open the Signoff Home tab to approve or deny."))
    return Message(f"{counted(len(waiting), 'approval')} waiting on you; {counted(len(runs), 'recent run')}", blocks)
