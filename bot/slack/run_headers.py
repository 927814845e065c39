"""The run's message in its channel, kept in line with where the run stands: working, waiting for
whom (with the budget used then), working again once people decided, and its ending (the notifier
draws that one itself). One `chat.update` per change of what it shows, not one per step."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from slack_sdk.errors import SlackApiError

from signoff.bot.slack import messages
from signoff.bot.slack.approval_cards import asked_with
from signoff.bot.slack.blocks import Message
from signoff.bot.slack.recent import Recent
from signoff.bot.words import run_goes_on_after
from signoff.runtime.records import ApprovalRecord, RunRecord

log = logging.getLogger("signoff.bot.slack.notifier")

Shows = tuple[str, ...]
"""What a run's message shows: its status, then the approvals it waits on."""


class RunHeaders:
    """Updates each run's message (at `thread`, where the notifier posted it) as the run moves on."""

    def __init__(self, update: Callable[[str, str, Message], None]) -> None:
        self._update = update
        self._shows: Recent[str, tuple[int, Shows]] = Recent()
        """By run: the run's version its message was last drawn from, and what it shows."""
        self._lock = threading.Lock()
        self._turns: Recent[str, threading.Lock] = Recent()
        """By run: updates of its message take turns (a decision's thread and the run's worker both
        update it, and the older run must never be drawn over the newer); other runs' never wait."""

    def told(self, run: RunRecord) -> None:
        """The notifier posted the run's message as `run` stands."""
        with self._lock:
            self._shows.put(run.run_id, (run.version, (run.status,)))

    def ended(self, run: RunRecord, thread: tuple[str, str]) -> None:
        """Draw the run's message as it ended."""
        self._show(run, thread, (run.status,), messages.run_message(run), again=True)

    def working(self, run: RunRecord, thread: tuple[str, str] | None) -> None:
        """A step of `run` told its result: it works (said once, at its first step or the first since a pause)."""
        if run.status == "running":
            self._show(run, thread, ("running",), messages.run_message(run))

    def waiting(self, run: RunRecord, thread: tuple[str, str] | None, approvals: Sequence[ApprovalRecord]) -> None:
        """`run` paused for people: its message says for whom, as the card names them, and its budget now."""
        if run.status == "awaiting_approval":
            waits_on = tuple(a.approval_id for a in approvals if a.status == "pending")
            self._show(run, thread, ("awaiting_approval", *waits_on), messages.run_message(run, waiting=approvals))

    def going_on(self, run: RunRecord, thread: tuple[str, str] | None, approvals: Sequence[ApprovalRecord]) -> None:
        """`approvals` are every call `run` waits on, as a card shows them: once each is decided so
        the run goes on, its message says working. Only while the run still waits on these very
        calls: a card redrawn later (recovery, a grant shown) says nothing of where the run is now."""
        if run.status == "awaiting_approval" and all(
                asked_with(run, a) is not None and run_goes_on_after(a) for a in approvals):
            self._show(run, thread, ("running",), messages.run_message(run, now="running"))

    def _turn(self, run_id: str) -> threading.Lock:
        with self._lock:
            turn = self._turns.get(run_id)
            if turn is None:
                turn = threading.Lock()
                self._turns.put(run_id, turn)
            return turn

    def _show(self, run: RunRecord, thread: tuple[str, str] | None, shows: Shows, message: Message,
              again: bool = False) -> None:
        """Update the run's message if what it shows changed. A failure is logged only: the card or
        result that came with it is told all the same, and the run's ending draws it anew."""
        if thread is None:
            return
        with self._turn(run.run_id):
            with self._lock:
                shown = self._shows.get(run.run_id)
            if shown is not None and (run.version < shown[0] or (shown[1] == shows and not again)):
                return  # drawn from a newer run already, or showing this already
            try:
                self._update(*thread, message)
            except (SlackApiError, OSError) as exc:
                with self._lock:
                    self._shows.pop(run.run_id)
                if again:
                    raise  # an ending's update is retold by recovery; the runner logs the failure
                log.warning("run %s: could not show it %s on its message: %s", run.run_id, shows[0], exc)
                return
            with self._lock:
                self._shows.put(run.run_id, (run.version, shows))
