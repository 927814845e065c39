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
from signoff.bot.words import approval_progress, plain_budget_line, receipt_words, status_words, who_decides
from signoff.runtime.audit import Selection
from signoff.runtime.audit_verify import verify
from signoff.runtime.caller_runs import run_tools
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.runner import Runner
from signoff.runtime.step_up import step_up_of

RUNS_SHOWN = 50
"""Runs a page of the list shows; its "Older runs" link goes on from the last."""
RUNS_READ = 200
"""Runs read at a time while a page is filled (the store filters by status, requester and tool;
who may see a run and its channel are judged here)."""
RUNS_LOOKED_AT = 2000
"""The most runs one page looks through before it stops and offers the rest behind its link, so a
filter few runs match never reads the whole table in one request."""
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
    receipt: str | None = None
    """Its decision's signed receipt in short, as the card shows it (None: undecided, or unsigned)."""


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


@dataclass(frozen=True)
class RunsPage:
    rows: list[RunRow]
    older_than: str | None
    """The run the next page goes on after (None: no older run matches)."""


def visible_runs(runner: Runner, user: str, wanted: Mapping[str, str], older_than: str | None = None) -> RunsPage:
    """The runs `user` may see that match every filter given (`FILTERS`), newest first, a page at a
    time: those after `older_than`, up to `RUNS_SHOWN`."""
    chosen = {name: value.strip() for name, value in wanted.items() if value.strip()}
    rows: list[RunRow] = []
    looked_at = 0
    while len(rows) < RUNS_SHOWN and looked_at < RUNS_LOOKED_AT:
        read = runner.store.list_runs(status=chosen.get("status"), requester=chosen.get("requester"),
                                      tool=chosen.get("tool"), older_than=older_than, limit=RUNS_READ)
        for run in read:
            looked_at, older_than = looked_at + 1, run.run_id
            channel = str(run.origin.get("channel") or "")
            if (not run.unreadable and runner.visibility_refusal(user, run) is None
                    and chosen.get("channel", channel) == channel):
                rows.append(RunRow(run, status_words(run.status), channel, _tools_of(runner, run.run_id)))
                if len(rows) == RUNS_SHOWN:
                    break
        if len(read) < RUNS_READ and (not read or older_than == read[-1].run_id):
            return RunsPage(rows, None)
    return RunsPage(rows, older_than)


def _tools_of(runner: Runner, run_id: str) -> tuple[str, ...]:
    """The tools the run asked about or started."""
    asked = {a.tool for a in runner.store.list_approvals(run_id=run_id, limit=1000)}
    return tuple(sorted(asked | {str(e["tool"]) for e in runner.store.executions(run_id)}))


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
        step_ups=[e["step_up"] for e in mine if isinstance(e.get("step_up"), dict)],
        receipt=receipt_words(receipt) if (receipt := _receipt(runner, approval)) is not None else None)


def _receipt(runner: Runner, approval: ApprovalRecord) -> dict[str, Any] | None:
    return None if approval.status == "pending" else runner.store.receipt_of(approval_id=approval.approval_id)


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
