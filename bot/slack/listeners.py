"""Bolt listeners. Thin: ack() first, parse, one runner call, render the outcome.

Every handler is idempotent: Slack retries, and a signed request replayed inside its 5-minute
window verifies. Decisions are compare-and-set in the store; slash commands dedupe on trigger_id.
The listeners themselves live by what they answer: `commands`, `decisions`, `run_buttons`, `home`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from slack_bolt import Ack, App, Respond

from signoff.bot.slack import blocks
from signoff.bot.slack.commands import Commands
from signoff.bot.slack.decisions import Decisions
from signoff.bot.slack.home import Home
from signoff.bot.slack.notices import Notices
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.run_buttons import RunButtons
from signoff.bot.slack.seen import SeenTriggers
from signoff.bot.slack.workers import Workers
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.listeners")

FAILED_REQUEST = ("Signoff could not finish handling that (the error is in its log). If nothing above "
                  "changed, nothing was decided: please try again in a moment.")


def tell_failure(error: Exception, body: Any, respond: Respond | None) -> None:
    """Log a request that failed after its ack, and tell the person (else they would hear nothing)."""
    log.error("slack request failed: %s: %s (type=%s)", type(error).__name__, error,
              body.get("type") if isinstance(body, dict) else None, exc_info=error)
    if respond is None:
        return
    try:
        respond(text=FAILED_REQUEST, response_type="ephemeral", replace_original=False)
    except Exception as exc:  # Slack is failing too; the log above is all we can do
        log.warning("could not tell the user their request failed: %s", exc)


def answered(listener: Callable[[Ack, dict[str, Any]], None]) -> Callable[..., None]:
    """`listener`, with a failure after its ack handled here rather than by Bolt.

    Bolt resets the ack of a listener that raises, and when that happens before Bolt has read the
    ack (a database that refuses connections fails in a millisecond) the request is answered 404
    after 3 s, and Slack shows the person an error. A failure before the ack still goes to Bolt.
    """
    def run(ack: Ack, body: dict[str, Any], respond: Respond | None = None) -> None:
        try:
            listener(ack, body)
        except Exception as exc:
            if ack.response is None:
                raise
            tell_failure(exc, body, respond)

    return run


class Listeners:
    """Every listener, sharing the runner, the worker pool and the notifier."""

    def __init__(self, runner: Runner, workers: Workers, notifier: SlackNotifier, *,
                 clock: Callable[[], float] = time.time, replay_window_s: float = 300.0) -> None:
        notices = Notices(notifier.client)
        self.home = Home(runner, notifier, notices)
        self.commands = Commands(runner, workers, SeenTriggers(replay_window_s, clock))
        self.decisions = Decisions(runner, workers, notifier, notices, self.home)
        self.run_buttons = RunButtons(runner, workers, notifier, notices)

    def register(self, app: App) -> None:
        app.command(blocks.COMMAND)(answered(self.commands.on_command))
        app.action(blocks.APPROVE_ACTION)(answered(self.decisions.on_approve))
        app.action(blocks.APPROVE_SIMILAR_ACTION)(answered(self.decisions.on_approve_similar))
        app.action(blocks.APPROVE_ALL_ACTION)(answered(self.decisions.on_approve_all))
        app.action(blocks.DENY_ACTION)(answered(self.decisions.on_deny))
        app.action(blocks.EDIT_ACTION)(answered(self.decisions.on_edit))
        app.action(blocks.VIEW_ARGS_ACTION)(answered(self.decisions.on_view_args))
        app.view_submission(blocks.DENY_MODAL)(answered(self.decisions.on_deny_submitted))
        app.view_submission(blocks.EDIT_MODAL)(answered(self.decisions.on_edit_submitted))
        app.action(blocks.REVOKE_GRANT_ACTION)(answered(self.home.on_revoke_grant))
        for action in blocks.RUN_ACTIONS:
            app.action(action)(answered(self.run_buttons.on_press))
        app.action(blocks.VIEW_RESULT_ACTION)(answered(self.run_buttons.on_view_result))
        app.event("app_home_opened")(self.home.on_opened)
