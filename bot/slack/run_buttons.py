"""The buttons on a stopped run (Extend, Close, Retry, Mark done, Abort), and what a run command's
outcome is told as; `/signoff cancel` says it the same way."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, assert_never

from slack_bolt import Ack
from slack_sdk.errors import SlackApiError

from signoff.bot.slack import blocks, messages
from signoff.bot.slack.blocks import safe
from signoff.bot.slack.notices import Notices
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.payloads import RunClick, Where, parse_click
from signoff.bot.slack.replies import already_text, done_text, no_visible_run, not_done_text
from signoff.bot.slack.workers import Workers
from signoff.runtime.records import AlreadyDone, Done, Missing, NotAllowed, Refused, RunOutcome, RunRecord
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.run_buttons")

_REQUEST_OF_BUTTON = {  # each stopped-run button, and what it asks of the runner (`AlreadyDone.what`)
    blocks.EXTEND_ACTION: "extend", blocks.CLOSE_ACTION: "cancel", blocks.RETRY_ACTION: "retry",
    blocks.RECONCILE_DONE_ACTION: "reconcile.done", blocks.RECONCILE_RETRY_ACTION: "reconcile.retry",
    blocks.RECONCILE_ABORT_ACTION: "reconcile.abort",
}


def running_text(runner: Runner, run_id: str) -> str | None:
    """What is still true after a cancel: a call that has started cannot be called back."""
    running = runner.running_call(run_id)
    if running is None:
        return None
    tool, key = running
    return f"`{safe(tool, 64)}` (key `{safe(key, 120)}`) is already running and will finish; nothing after it will run."


def run_outcome_text(outcome: RunOutcome, run_id: str, done: Callable[[], str], workers: Workers) -> str:
    """What to say about a run command; on `Done` the run goes to the workers to apply it."""
    match outcome:
        case Done():
            text = done()  # before the workers start: it may say what is running now
            workers.submit(run_id)
            return text
        case AlreadyDone(what=what, by=by, at=at):
            return already_text(what, by, at)
        case Refused(reason=reason) | NotAllowed(reason=reason):
            return not_done_text(reason)
        case Missing():
            return no_visible_run(run_id)
        case _:
            assert_never(outcome)


class RunButtons:
    """The listener for every stopped-run button."""

    def __init__(self, runner: Runner, workers: Workers, notifier: SlackNotifier, notices: Notices) -> None:
        self.runner, self.workers, self.notifier, self.notices = runner, workers, notifier, notices

    def on_press(self, ack: Ack, body: dict[str, Any]) -> None:
        ack()
        click = parse_click(body)
        if not isinstance(click, RunClick):
            self.notices.refuse_malformed(body, click)
            return
        outcome = self._run_command(click)
        text = run_outcome_text(outcome, click.run_id, lambda: self._pressed_text(click), self.workers)
        match outcome:
            case Done(run=run):  # the buttons make way for what was done
                self._show_closed(click.where, run, text)
            case AlreadyDone(what=what, by=by, at=at):
                self.notices.tell(click.where, text)
                current = self.runner.get_run(click.run_id, history=False)
                if current is not None:  # this copy of the message may still show its buttons
                    self._show_closed(click.where, current, done_text(what, by, at))
            case _:
                self.notices.tell(click.where, text)

    def _run_command(self, click: RunClick) -> RunOutcome:
        who, run_id, shown = click.where.user, click.run_id, click.shown_version
        match click.action:
            case blocks.EXTEND_ACTION:
                return self.runner.extend(run_id, who, shown_version=shown)
            case blocks.CLOSE_ACTION:
                return self.runner.cancel(run_id, who, reason=f"closed by {who}", shown_version=shown)
            case blocks.RETRY_ACTION:
                return self.runner.retry(run_id, who, shown_version=shown)
            case blocks.RECONCILE_DONE_ACTION | blocks.RECONCILE_RETRY_ACTION | blocks.RECONCILE_ABORT_ACTION:
                return self.runner.reconcile(run_id, who, click.action.rsplit(".", 1)[1], shown_version=shown)
            case _:
                return Refused("unknown button")

    def _pressed_text(self, click: RunClick) -> str:
        text = done_text(_REQUEST_OF_BUTTON[click.action], click.where.user, None)
        running = running_text(self.runner, click.run_id) if click.action == blocks.CLOSE_ACTION else None
        return f"{text} {running}" if running else text

    def _show_closed(self, where: Where, run: RunRecord, note: str) -> None:
        if not (where.channel and where.message_ts):
            return
        try:
            self.notifier.update(where.channel, where.message_ts, messages.run_closed_message(run, note))
        except SlackApiError as exc:
            log.warning("run %s: could not take the buttons off its message: %s", run.run_id, exc)
