"""What each console page shows, read through the runner: which runs a person may see (filtered),
a run's story (its calls as the card shows their arguments, its approvals with who was asked,
reminded and who decided, its executions, its budget and its audit chain's verdict), and the
approvals waiting on them. Only what `Runner.visibility_refusal` and `Runner.approval_refusal` let
the person see or decide is read out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from signoff.bot.arguments import ToolDisplay, argument_lines
from signoff.bot.words import approval_progress, plain_budget_line, status_words, who_decides
from signoff.runtime.approval import step_up_of
from signoff.runtime.audit import Selection
from signoff.runtime.audit_verify import verify
from signoff.runtime.caller_runs import run_tools
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.runner import Runner

RUNS_READ = 200
"""The newest runs a list looks through (each person sees those of them they may)."""
FILTERS = ("status", "requester", "channel", "tool")


@dataclass(frozen=True)
class RunRow:
    run: RunRecord
    status: str
    channel: str
    tools: tuple[str, ...]


@dataclass(frozen=True)
class ApprovalView:
    """One approval as a page shows it: its call's arguments as the card shows them, who was asked
    and who decided, how long it waited, and whether approving it needs a fresh sign-in."""

    approval: ApprovalRecord
    arguments: list[str]
    asked_of: str
    progress: str
    waited: str | None
    reminded: int
    step_up: int | None
    """Seconds a sign-in approving it may be old (None: any decision counts)."""
    step_ups: list[dict[str, Any]] = field(default_factory=list)
    """The stepped-up sign-ins its decisions were made with (`approval.SignIn.to_json`)."""


@dataclass(frozen=True)
class Story:
    run: RunRecord
    status: str
    budget: str
    approvals: list[ApprovalView]
    executions: list[dict[str, Any]]
    events: list[dict[str, Any]]
    audit: str
    audit_ok: bool


def display(runner: Runner, run: RunRecord, tool: str) -> ToolDisplay:
    """How the card shows `tool`'s arguments in `run` (its order, its secret names)."""
    return ToolDisplay.of(run_tools(run, runner.tools).get(tool), runner.config.redact_keys)


def visible_runs(runner: Runner, user: str, wanted: Mapping[str, str]) -> list[RunRow]:
    """The runs `user` may see, newest first, that match every filter given (`FILTERS`)."""
    runs = [run for run in runner.store.list_runs(status=wanted.get("status") or None, limit=RUNS_READ)
            if not run.unreadable and runner.visibility_refusal(user, run) is None]
    asked: dict[str, set[str]] = {}
    for approval in runner.store.list_approvals(limit=RUNS_READ * 4):
        asked.setdefault(approval.run_id, set()).add(approval.tool)
    rows = [RunRow(run, status_words(run.status), str(run.origin.get("channel") or ""),
                   tuple(sorted(asked.get(run.run_id, set())))) for run in runs]
    return [row for row in rows
            if (not wanted.get("requester") or row.run.requester == wanted["requester"].strip())
            and (not wanted.get("channel") or row.channel == wanted["channel"].strip())
            and (not wanted.get("tool") or wanted["tool"].strip() in row.tools)]


def approval_view(runner: Runner, run: RunRecord, approval: ApprovalRecord,
                  events: Sequence[Mapping[str, Any]] = ()) -> ApprovalView:
    mine = [e for e in events if e.get("approval_id") == approval.approval_id]
    end = approval.decided_at or (None if approval.status == "pending" else approval.consumed_at)
    step_up = step_up_of(approval.asked)
    return ApprovalView(
        approval=approval, arguments=argument_lines(approval.args, display(runner, run, approval.tool)),
        asked_of=who_decides(approval.asked), progress=approval_progress(approval),
        waited=_span(approval.requested_at, end) if end is not None else None,
        reminded=sum(1 for e in mine if e.get("type") == "approval_reminded"),
        step_up=int(step_up.total_seconds()) if step_up is not None else None,
        step_ups=[e["step_up"] for e in mine if isinstance(e.get("step_up"), dict)])


def story(runner: Runner, run: RunRecord) -> Story:
    """Everything the run's page shows."""
    events = runner.timeline(run.run_id)
    approvals = runner.store.list_approvals(run_id=run.run_id, limit=1000)[::-1]
    selection = Selection(run_id=run.run_id)
    with closing(runner.store.audit_records(selection)) as records:
        problem = verify(records, selection)
    return Story(run=run, status=status_words(run.status), budget=plain_budget_line(run.state),
                 approvals=[approval_view(runner, run, a, events) for a in approvals],
                 executions=runner.store.executions(run.run_id), events=events,
                 audit="every event matches its hash" if problem is None else str(problem), audit_ok=problem is None)


def waiting(runner: Runner, user: str) -> list[tuple[RunRecord, ApprovalView]]:
    """The pending approvals `user` may decide and has not yet, each with its run."""
    return [(run, approval_view(runner, run, approval)) for run, approval in runner.waiting_on(user, limit=50)]


def _span(start: datetime, end: datetime) -> str:
    seconds = max(int((end - start).total_seconds()), 0)
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h {seconds % 3600 // 60} min"
