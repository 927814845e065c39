"""The buttons on a run's messages: on a stopped run (Extend, Close, Retry, Mark done, Abort), and
*View full result* under a tool result; and what a run command's outcome is told as (`/signoff
cancel` says it the same way)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, assert_never

from slack_bolt import Ack
from slack_sdk.errors import SlackApiError

from signoff.bot.slack import blocks, messages, tool_results
from signoff.bot.slack.blocks import safe
from signoff.bot.slack.notices import Notices
from signoff.bot.slack.notifier import Ref, SlackNotifier
from signoff.bot.slack.payloads import Malformed, RunClick, Where, parse_click
from signoff.bot.slack.replies import already_text, done_text, no_visible_run, not_done_text
from signoff.bot.slack.workers import Workers
from signoff.bot.words import own_run_refusal
from signoff.runtime.deciders import SELF_REQUEST
from signoff.runtime.people import is_slack_user
from signoff.runtime.records import AlreadyDone, Done, Missing, NotAllowed, Refused, RunOutcome, RunRecord
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.run_buttons")

_REQUEST_OF_BUTTON = {  # each stopped-run button, and what it asks of the runner (`AlreadyDone.what`)
    blocks.EXTEND_ACTION: "extend", blocks.CLOSE_ACTION: "cancel", blocks.RETRY_ACTION: "retry",
    blocks.RECONCILE_DONE_ACTION: "reconcile.done", blocks.RECONCILE_RETRY_ACTION: "reconcile.retry",
    blocks.RECONCILE_ABORT_ACTION: "reconcile.abort", blocks.REQUEST_AGAIN_ACTION: "request_again",
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
    """The listener for every stopped-run button, and for *View full result*."""

    def __init__(self, runner: Runner, workers: Workers, notifier: SlackNotifier, notices: Notices) -> None:
        self.runner, self.workers, self.notifier, self.notices = runner, workers, notifier, notices

    def on_press(self, ack: Ack, body: dict[str, Any]) -> Callable[[], None] | None:
        ack()
        click = parse_click(body)
        if not isinstance(click, RunClick):
            self.notices.refuse_malformed(body, click)
            return None
        return lambda: self._press(click)  # after the ack, as a decision is (`listeners.answered`)

    def _press(self, click: RunClick) -> None:
        outcome = self._run_command(click)
        copies = self._copies(click)
        match outcome:
            case Done(run=run):  # the buttons make way for what was done, on every copy of the notice
                note = self._pressed_text(click)
                # Followed before the run is handed on: its worker shows where it went next.
                self.notifier.follow(run.run_id, copies, note)
                self._show_closed(copies, run, note)
                self.workers.submit(run.run_id)
            case AlreadyDone(what=what, by=by, at=at):
                self.notices.tell(click.where, already_text(what, by, at))
                current = self.runner.get_run(click.run_id, history=False)
                if current is not None:  # this copy of the message may still show its buttons
                    self._show_closed(copies, current, done_text(what, by, at))
            case NotAllowed(reason=reason) if reason.startswith(SELF_REQUEST):
                said = own_run_refusal(_REQUEST_OF_BUTTON[click.action]) + reason.removeprefix(SELF_REQUEST)
                self.notices.tell(click.where, not_done_text(said))
            case Refused(reason=reason) | NotAllowed(reason=reason):
                self.notices.tell(click.where, not_done_text(reason))
            case Missing():
                self.notices.tell(click.where, no_visible_run(click.run_id))
            case _:
                assert_never(outcome)

    def on_view_result(self, ack: Ack, body: dict[str, Any]) -> Callable[[], None] | None:
        """*View full result*: the modal with a tool result in full, for whoever may see the run."""
        ack()
        click = parse_result_click(body)
        if isinstance(click, Malformed):
            self.notices.refuse_malformed(body, click)
            return None
        return lambda: self._open_result(click)

    def _open_result(self, click: ResultClick) -> None:
        if not click.where.trigger_id:
            self.notices.tell(click.where, "Slack did not send what is needed to open the result; please click again.")
            return
        run = self.runner.get_run(click.run_id)
        if run is None or self.runner.visibility_refusal(click.where.user, run) is not None:
            self.notices.tell(click.where, no_visible_run(click.run_id))  # not seeing it and its absence read alike
            return
        entry = next((e for e in reversed(run.state.get("history", [])) if e.get("role") == "tool"
                      and e.get("step") == click.step and "result" in e), None)
        if entry is None:
            self.notices.tell(click.where, f"Run `{safe(run.run_id, 80)}` has no result for step {click.step}.")
            return
        secrets = self.notifier.display(str(entry.get("tool") or ""), run).secret_names
        self.notifier.client.views_open(trigger_id=click.where.trigger_id,
                                        view=tool_results.result_modal(run, entry, secret_names=secrets))

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
            case blocks.REQUEST_AGAIN_ACTION:
                return self.runner.request_again(run_id, who, shown_version=shown)
            case _:
                return Refused("unknown button")

    def _pressed_text(self, click: RunClick) -> str:
        text = done_text(_REQUEST_OF_BUTTON[click.action], click.where.user, None)
        running = running_text(self.runner, click.run_id) if click.action == blocks.CLOSE_ACTION else None
        return f"{text} {running}" if running else text

    def _copies(self, click: RunClick) -> list[Ref]:
        """The message pressed on and every other copy of it this process posted (thread and DM)."""
        where = click.where
        pressed: list[Ref] = [(where.channel, where.message_ts)] if where.channel and where.message_ts else []
        others = self.notifier.notice_copies(click.run_id, click.shown_version)
        return pressed + [ref for ref in others if ref not in pressed]

    def _show_closed(self, copies: list[Ref], run: RunRecord, note: str) -> None:
        message = messages.run_closed_message(run, note)
        for channel, ts in copies:
            try:
                self.notifier.update(channel, ts, message)
            except SlackApiError as exc:
                log.warning("run %s: could not take the buttons off its message: %s", run.run_id, exc)


@dataclass(frozen=True)
class ResultClick:
    """*View full result* pressed under a tool result in a run's thread."""

    run_id: str
    step: int
    where: Where


_RESULT_VALUE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_-]{0,63}):(\d{1,9})$")
_CHANNEL = re.compile(r"^[CGD][A-Z0-9]{2,30}$")


def parse_result_click(body: Any) -> ResultClick | Malformed:
    """A `block_actions` body of *View full result*, carrying `tool_results.result_value`."""
    if not isinstance(body, dict) or body.get("type") != "block_actions":
        return Malformed("not a button click")
    actions, user = body.get("actions"), body.get("user")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        return Malformed("expected exactly one action")
    clicker = user.get("id") if isinstance(user, dict) else None
    if not is_slack_user(clicker):
        return Malformed("no user in the click")
    value = actions[0].get("value")
    found = _RESULT_VALUE.match(value) if isinstance(value, str) else None
    if found is None:
        return Malformed("the button does not name a run and a step")
    container = body.get("container")
    channel = container.get("channel_id") if isinstance(container, dict) else None
    trigger, response_url = body.get("trigger_id"), body.get("response_url")
    where = Where(user=clicker, channel=channel if isinstance(channel, str) and _CHANNEL.match(channel) else None,
                  trigger_id=trigger if isinstance(trigger, str) and 0 < len(trigger) <= 1000 else None,
                  response_url=response_url if isinstance(response_url, str) and len(response_url) <= 1000 else None)
    return ResultClick(found.group(1), int(found.group(2)), where)
