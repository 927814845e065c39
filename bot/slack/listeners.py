"""Bolt listeners. Thin: ack() first, parse, one runner call, render the outcome.

Every handler is idempotent: Slack retries, and a signed request replayed inside its 5-minute
window verifies. Decisions are compare-and-set in the store; slash commands dedupe on trigger_id.
The listeners themselves live by what they answer: `commands`, `decisions`, `run_buttons`, `home`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from slack_bolt import Ack, App, Respond

from signoff.bot.slack import blocks
from signoff.bot.slack.access_review_cards import REVIEW_ACTIONS
from signoff.bot.slack.access_reviews import ReviewButtons
from signoff.bot.slack.commands import Commands
from signoff.bot.slack.decisions import Decisions, Rest
from signoff.bot.slack.glass_listeners import GlassListeners
from signoff.bot.slack.home import Home
from signoff.bot.slack.notices import Notices
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.run_buttons import RunButtons
from signoff.bot.slack.seen import SeenTriggers
from signoff.bot.slack.workers import Workers
from signoff.runtime.reviewing import AccessReviewer
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


Listener = Callable[[Ack, dict[str, Any]], Rest | None]


def answered(listener: Listener, later: Executor) -> Callable[..., None]:
    """`listener`, with a failure after its ack handled here rather than by Bolt, and the rest of
    its work (what it returns, if anything) run after the ack on `later`.

    Bolt resets the ack of a listener that raises, and when that happens before Bolt has read the
    ack (a database that refuses connections fails in a millisecond) the request is answered 404
    after 3 s, and Slack shows the person an error. A failure before the ack still goes to Bolt.

    Bolt runs a listener on its pool and answers the request once the listener acks; a listener
    that then decides and updates Slack holds its thread meanwhile. In a burst of clicks the pool
    fills with that work and the clicks behind it wait to be acked. A listener that hands back its
    rest lets go of its thread at the ack; the rest is queued on the same pool, behind the clicks
    that arrived before it, which are acked first.
    """
    def run(ack: Ack, body: dict[str, Any], respond: Respond | None = None) -> None:
        try:
            rest = listener(ack, body)
        except Exception as exc:
            if ack.response is None:
                raise
            tell_failure(exc, body, respond)
            return
        if rest is not None:
            later.submit(_finish, rest, body, respond)

    return run


def _finish(rest: Rest, body: dict[str, Any], respond: Respond | None) -> None:
    try:
        rest()
    except Exception as exc:
        tell_failure(exc, body, respond)


def _finish_event(listener: Callable[[dict[str, Any]], None], event: dict[str, Any]) -> None:
    try:
        listener(event)
    except Exception as exc:  # nobody to tell: an event has no response_url
        log.error("slack event failed: %s: %s (type=%s)", type(exc).__name__, exc, event.get("type"), exc_info=exc)


class Listeners:
    """Every listener, sharing the runner, the worker pool and the notifier."""

    def __init__(self, runner: Runner, workers: Workers, notifier: SlackNotifier, later: Executor, *,
                 clock: Callable[[], float] = time.time, replay_window_s: float = 300.0,
                 reviewer: AccessReviewer | None = None) -> None:
        self.later = later
        notices = Notices(notifier.client)
        self.reviews = ReviewButtons(reviewer, notices) if reviewer is not None else None
        self.home = Home(runner, notifier, notices)
        self.commands = Commands(runner, workers, SeenTriggers(replay_window_s, clock))
        self.decisions = Decisions(runner, workers, notifier, notices, self.home)
        self.run_buttons = RunButtons(runner, workers, notifier, notices)
        self.glass = GlassListeners(self.decisions)

    def register(self, app: App) -> None:
        app.command(blocks.COMMAND)(answered(self.commands.on_command, self.later))
        app.action(blocks.APPROVE_ACTION)(answered(self.decisions.on_approve, self.later))
        app.action(blocks.APPROVE_SIMILAR_ACTION)(answered(self.decisions.on_approve_similar, self.later))
        app.action(blocks.APPROVE_ALL_ACTION)(answered(self.decisions.on_approve_all, self.later))
        app.action(blocks.DENY_ACTION)(answered(self.decisions.on_deny, self.later))
        app.action(blocks.EDIT_ACTION)(answered(self.decisions.on_edit, self.later))
        app.action(blocks.VIEW_ARGS_ACTION)(answered(self.decisions.on_view_args, self.later))
        app.action(blocks.OPEN_PAGE_ACTION)(_only_ack)
        app.view_submission(blocks.DENY_MODAL)(answered(self.decisions.on_deny_submitted, self.later))
        app.view_submission(blocks.EDIT_MODAL)(answered(self.decisions.on_edit_submitted, self.later))
        app.action(blocks.REVOKE_GRANT_ACTION)(answered(self.home.on_revoke_grant, self.later))
        app.action(blocks.BREAK_GLASS_ACTION)(answered(self.glass.on_break_glass, self.later))
        app.view_submission(blocks.BREAK_GLASS_MODAL)(answered(self.glass.on_glass_submitted, self.later))
        for action in blocks.GLASS_REVIEW_ACTIONS:
            app.action(action)(answered(self.glass.on_review, self.later))
        for action in blocks.RUN_ACTIONS:
            app.action(action)(answered(self.run_buttons.on_press, self.later))
        app.action(blocks.VIEW_RESULT_ACTION)(answered(self.run_buttons.on_view_result, self.later))
        app.event("app_home_opened")(self._later_event(self.home.on_opened))
        if self.reviews is not None:
            for action in REVIEW_ACTIONS:
                app.action(action)(answered(self.reviews.on_press, self.later))

    def _later_event(self, listener: Callable[[dict[str, Any]], None]) -> Callable[..., None]:
        """An event listener run after the event's ack (Bolt acks an event before its listener runs
        only when it processes after the response, which Signoff does not: see `app.build_app`)."""
        def run(event: dict[str, Any]) -> None:
            self.later.submit(_finish_event, listener, event)

        return run


def _only_ack(ack: Ack) -> None:
    """A link button's click: Slack opens the link itself; the app has only to acknowledge it."""
    ack()
