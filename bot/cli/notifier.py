"""`runtime.telling_ports.Notifier` for a person at a terminal: progress per step, proposals as Slack shows them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from signoff.bot.arguments import ToolDisplay
from signoff.bot.cli.console import Console
from signoff.bot.cli.rendering import approval_card, find_call, malformed_lines, one_line, step_lines
from signoff.bot.words import (
    approval_progress,
    approval_words,
    deciders,
    goes_on_after_expiry,
    people,
    plain_budget_line,
    timed_out_words,
    who_decides,
)
from signoff.runtime.break_glass import FollowUp
from signoff.runtime.cards import Card
from signoff.runtime.records import ApprovalRecord, GrantRecord, RunRecord
from signoff.runtime.state import DEFAULT_REDACT_KEYS
from signoff.tools.base import Tool


class TerminalNotifier:
    """Tells `console` what a run does, and prints each approval card once per process."""

    def __init__(self, console: Console, tools: Mapping[str, Tool], *,
                 redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.console = console
        self.tools = tools
        self.redact_keys = frozenset(redact_keys)
        self.clock = clock
        self.announced: set[str] = set()
        self.shown: set[str] = set()
        """Approvals whose card this process has printed."""
        self.told_malformed: set[tuple[str, int]] = set()
        """(run, step) of each malformed reply this process has reported or was told to skip."""
        self.looked_at: dict[str, int] = {}
        """By run: how much of its history was searched for malformed replies (it only grows)."""

    def skip_earlier(self, run: RunRecord) -> None:
        """Report only what `run` does from here on (a resumed run's earlier steps are not news)."""
        self.told_malformed |= {(run.run_id, step) for step in self._malformed_steps(run)}

    def _tell_malformed(self, run: RunRecord) -> None:
        """Report the replies the loop could not use; no notifier call carries them, so each call
        reports those since the last (a run's history is in order, so these come first)."""
        if not self.console.says:  # nothing would be printed: not even the history is searched
            return
        for step in self._malformed_steps(run):
            if (run.run_id, step) not in self.told_malformed:
                self.told_malformed.add((run.run_id, step))
                for line in malformed_lines(run.state.get("history", []), step):
                    self.console.say(line)

    def run_started(self, run: RunRecord) -> dict[str, Any] | None:
        # The runner announces a run on every `execute` until a Slack thread exists; say it once.
        if run.run_id not in self.announced:
            self.announced.add(run.run_id)
            self.console.say(f"run {run.run_id} by {run.requester}: {one_line(run.goal, 200)}")
            self.console.say(f"  budget: {plain_budget_line(run.state)}")
        return None

    def approval_requested(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> dict[str, Any] | None:
        self._tell_malformed(run)
        self.show_approval(run, approval)
        # Recorded as the approval's message, so no Slack process re-posts it as "never shown".
        return {"shown_in": "terminal", "to": run.requester}

    def batch_requested(self, run: RunRecord, approvals: list[ApprovalRecord]) -> dict[str, Any] | None:
        self._tell_malformed(run)
        tools = ", ".join(f"{a.tool} ({a.key})" for a in approvals)
        self.console.say(f"  the model asked for {len(approvals)} calls at once: {tools}; each is asked about on "
                         "its own, in order, and the model hears every outcome once all are settled")
        return {"shown_in": "terminal", "to": run.requester}

    def show_approval(self, run: RunRecord, approval: ApprovalRecord) -> None:
        """Print the approval card once per process."""
        if approval.approval_id in self.shown:
            return
        self.shown.add(approval.approval_id)
        display = self.display(approval.tool)
        # Shown even with --quiet to a person at a terminal: they are about to be asked about it.
        self.console.show(approval_card(run, approval, self.tools.get(approval.tool), display.secret_names,
                                        self.clock()))

    def approval_decided(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        note = f": {approval.note}" if approval.note else ""
        self.console.say(f"  {approval_words(approval.status, deciders(approval))}{note}")

    def approval_updated(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        self.console.say(f"  {approval_progress(approval)}")

    def approval_reminded(self, run: RunRecord, approval: ApprovalRecord, tell: list[str]) -> None:
        self.console.say(f"  reminder: the approval for {approval.tool} ({approval.key}) still waits for "
                         f"{who_decides({**(approval.asked or {}), 'rule': None})}; it expires "
                         f"{approval.expires_at:%H:%M:%S} UTC")

    def approval_escalated(self, run: RunRecord, approval: ApprovalRecord, added: list[str], tell: list[str]) -> None:
        self.console.say(f"  escalated: nobody decided in time, so {people(added)} may now decide the approval "
                         f"for {approval.tool} ({approval.key})")

    def glass_follow_up(self, run: RunRecord, approval: ApprovalRecord, kind: FollowUp,
                        receipt: Mapping[str, Any] | None) -> dict[str, Any] | None:
        glass = approval.glass or {}
        said = {"tell": f"break-glass: {glass.get('by')} approved {approval.tool} ({approval.key}) alone: "
                        f"{one_line(glass.get('reason'), 500)!r}; its review is owed by {glass.get('review_by')}",
                "remind": f"reminder: the break-glass on {approval.tool} ({approval.key}) waits for its review",
                "overdue": f"overdue: the break-glass on {approval.tool} ({approval.key}) was not reviewed in time"}
        self.console.say(f"  {said[kind]}")
        return None

    def glass_reviewed(self, run: RunRecord, approval: ApprovalRecord) -> None:
        review = approval.glass_review or {}
        self.console.say(f"  the break-glass on {approval.tool} ({approval.key}) was {review.get('verdict')} "
                         f"by {review.get('by')}")

    def approval_expired(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        then = (f": the model is told {timed_out_words(approval.asked)}, and the run goes on"
                if approval.asked is not None and goes_on_after_expiry(approval.asked) else "")
        self.console.say(f"  the approval for {approval.tool} ({approval.key}) expired; nothing was executed{then}")

    def tool_result(self, run: RunRecord, entry: dict[str, Any], grant: GrantRecord | None) -> None:
        # Every step comes through here: with --quiet nothing of it is printed, so nothing is built.
        if not self.console.says:
            return
        self._tell_malformed(run)
        call = find_call(run.state.get("history", []), entry)
        for line in step_lines(call, entry, self.display(entry.get("tool", "")).secret_names):
            self.console.say(line)

    def run_finished(self, run: RunRecord) -> None:
        self._tell_malformed(run)
        self.console.say(f"  finished after {run.state.get('steps', 0)} step(s); {plain_budget_line(run.state)}")

    def run_stopped(self, run: RunRecord) -> None:
        self._tell_malformed(run)
        reason = (run.stop or {}).get("reason", "")
        self.console.say(f"  stopped: {run.status}{': ' + reason if reason else ''}")

    def display(self, tool_name: str) -> ToolDisplay:
        """How the person at the keyboard is shown `tool_name`, as Slack shows it to approvers."""
        return ToolDisplay.of(self.tools.get(tool_name), self.redact_keys)

    def _malformed_steps(self, run: RunRecord) -> list[int]:
        """The steps of malformed replies in the part of `run`'s history not searched before: each
        step's entries are searched once, not again at every step after it."""
        history = run.state.get("history", [])
        start = min(self.looked_at.get(run.run_id, 0), len(history))
        self.looked_at[run.run_id] = len(history)
        return [int(history[i].get("step") or 0) for i in range(start, len(history))
                if history[i].get("role") == "assistant" and "malformed" in history[i]]


