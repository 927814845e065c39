"""The stopped-run notices someone acted on, kept in line with where the run went next: working,
then how its worker left it (waiting for a person, stopped again, done). Remembered in this
process's memory only, a bounded amount; a notice acted on elsewhere is not followed here."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from slack_sdk.errors import SlackApiError

from signoff.bot.slack import messages
from signoff.bot.slack.blocks import Message
from signoff.bot.slack.recent import Recent
from signoff.runtime.records import RunRecord

log = logging.getLogger("signoff.bot.slack.notifier")


class FollowedNotices:
    """Updates each followed notice (with `update`, the notifier's `chat.update`) as its run moves on."""

    def __init__(self, update: Callable[[str, str, Message], None]) -> None:
        self._update = update
        self._followed: Recent[str, list[_Followed]] = Recent()
        """run id -> notices someone acted on, to show where the run went next."""
        self._lock = threading.Lock()

    def follow(self, run_id: str, notices: Iterable[tuple[str, str]], note: str) -> None:
        """Show, on `notices`, `note` and where the run stands each time it moves on."""
        followed = [_Followed(ref, note) for ref in notices]
        with self._lock:
            self._followed.put(run_id, [*(self._followed.get(run_id) or ()), *followed])

    def show(self, run: RunRecord, *, done: bool) -> None:
        """Bring the notices followed for `run` up to where it stands; `done`: the worker has left it
        there (waiting, stopped, ended), so they are shown once more and forgotten."""
        with self._lock:
            followed = self._followed.pop(run.run_id) if done else self._followed.get(run.run_id)
            due = [f for f in followed or () if done or f.shown != run.status]
            for item in due:
                item.shown = run.status
        for item in due:
            try:
                self._update(*item.ref, messages.run_closed_message(run, item.note, now=run.status))
            except SlackApiError as exc:
                log.warning("run %s: could not show where it went on on %s: %s", run.run_id, item.ref, exc)


class _Followed:
    """A notice someone acted on: where it is, what it says was done, and the status it shows."""

    def __init__(self, ref: tuple[str, str], note: str) -> None:
        self.ref, self.note = ref, note
        self.shown: str | None = None
