"""The Bolt app: `build_app(...)` wires the listeners to a runner, its workers and its notifier."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from slack_bolt import App, BoltContext, BoltResponse, Respond
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk import WebClient

from signoff.bot.slack.listeners import Listeners, tell_failure
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.workers import Workers
from signoff.runtime.reviewing import AccessReviewer
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.app")

LISTENER_THREADS = 8
"""Threads for what listeners do after their acks (decide, update the card). The acks themselves
are answered on the server's request threads, so more of these only let more decisions wait at
once for the interpreter lock and for a database connection (PostgreSQL's pool is 10 + 10, shared
with the run workers; SQLite writes one at a time), slowing the acks and the runs beside them
(`python -m bench.slack_ack`, a burst of Approve clicks). Queued decisions are taken in the order
the clicks came."""


@dataclass(frozen=True)
class AppOptions:
    """How the Bolt app is built; the defaults are production's."""

    signing_secret: str | None = None
    """Required in HTTP mode; None in Socket Mode, where Slack does not sign requests."""
    process_before_response: bool = True
    """Bolt answers a request when its listener returns, not by polling for its ack every 10 ms
    from the request's thread; each listener acks and hands back what it does after the ack
    (`listeners.answered`), so it returns within milliseconds."""
    token_verification: bool = True
    """Call `auth.test` at start-up, so a bad token stops start-up instead of the first request."""
    replay_window_s: float = 300.0
    listener_executor: Executor | None = None
    """Where Bolt runs listeners after the ack; tests pass one they can wait on."""
    clock: Callable[[], float] = time.time
    """Seconds since the epoch, for expiry checks made before the store is asked."""


def build_app(
    runner: Runner, *, client: WebClient, workers: Workers, notifier: SlackNotifier, options: AppOptions | None = None,
    reviewer: AccessReviewer | None = None,
) -> App:
    """The Bolt app with every Signoff listener registered (`reviewer`: Keep and Revoke on
    reviews of standing access, when they are on)."""
    options = options or AppOptions()
    _quiet_about_the_token()
    # What listeners do after their acks runs here, in the order the requests came.
    pool = options.listener_executor or _started(ThreadPoolExecutor(max_workers=LISTENER_THREADS,
                                                                    thread_name_prefix="signoff-listener"))
    app = App(
        name="signoff",
        client=client,
        signing_secret=options.signing_secret or "",
        request_verification_enabled=options.signing_secret is not None,
        token_verification_enabled=options.token_verification,
        process_before_response=options.process_before_response,
        listener_executor=pool,
    )
    app.use(installed_workspace_only)
    Listeners(runner, workers, notifier, pool, clock=options.clock,
              replay_window_s=options.replay_window_s, reviewer=reviewer).register(app)

    @app.error
    def on_error(error: Exception, body: dict[str, Any], respond: Respond | None = None) -> None:
        tell_failure(error, body, respond)

    return app


def _started(pool: ThreadPoolExecutor) -> ThreadPoolExecutor:
    """The pool with all its threads started now. A pool starts a thread on a submit that finds
    none idle, holding the lock every pool of the process shares: in a burst, the requests handing
    on their work would wait there for each new thread in turn."""
    meet = threading.Barrier(LISTENER_THREADS)
    for _ in range(LISTENER_THREADS):
        pool.submit(_wait_at, meet)
    return pool


def _wait_at(meet: threading.Barrier) -> None:
    with contextlib.suppress(threading.BrokenBarrierError):  # a thread not started in time starts later
        meet.wait(timeout=10)


class _UnusedTokenWarning(logging.Filter):
    """Drops Bolt's start-up warning that the token will be unused: Bolt reads SLACK_BOT_TOKEN from
    the environment even when given a client, which is how we give it the token on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def _quiet_about_the_token() -> None:
    bolt = logging.getLogger("slack_bolt.App")  # the logger Bolt's App warns on
    if not any(isinstance(f, _UnusedTokenWarning) for f in bolt.filters):
        bolt.addFilter(_UnusedTokenWarning())


NOT_INSTALLED_HERE = "Signoff is not installed in your workspace; nothing was done."


def installed_workspace_only(context: BoltContext, body: dict[str, Any], next: Callable[[], BoltResponse]) -> BoltResponse:
    """Global middleware: a request from another team or enterprise than the installed one is
    acknowledged and dropped (a Slack Connect channel or a second installation can send one)."""
    installed = context.authorize_result
    if installed is None:  # Slack's URL and SSL checks, which Bolt answers itself and which act on nothing
        return next()
    reason = foreign_reason(installed.team_id, installed.enterprise_id, request_teams(context, body),
                            request_enterprises(context, body))
    if reason is None:
        return next()
    log.warning("refused a request (type=%s): %s", body.get("type") or body.get("command"), reason)
    # Slack shows a slash command's reply to its sender; any other body is ignored, or must be empty.
    return BoltResponse(status=200, body=NOT_INSTALLED_HERE if "command" in body else "")


def foreign_reason(team: str | None, enterprise: str | None, teams: set[str], enterprises: set[str]) -> str | None:
    """Why a request naming `teams` and `enterprises` is not from the installed workspace, or None."""
    if not teams:
        return "it names no team"
    if teams != {team}:
        return f"it comes from team {', '.join(sorted(teams - {team or ''}))!r}, not {team!r}"
    if enterprises - {enterprise}:
        return f"it comes from enterprise {', '.join(sorted(enterprises - {enterprise or ''}))!r}, not {enterprise!r}"
    return None


def request_teams(context: BoltContext, body: dict[str, Any]) -> set[str]:
    user = body.get("user")
    found = {context.team_id, context.actor_team_id, user.get("team_id") if isinstance(user, dict) else None}
    return {t for t in found if isinstance(t, str) and t}


def request_enterprises(context: BoltContext, body: dict[str, Any]) -> set[str]:
    user, team = body.get("user"), body.get("team")
    found = {context.enterprise_id, context.actor_enterprise_id,
             user.get("enterprise_id") if isinstance(user, dict) else None,
             team.get("enterprise_id") if isinstance(team, dict) else None}
    return {e for e in found if isinstance(e, str) and e}
