"""Who is on call now in a schedule named as an approver, as Slack users: the schedule's emails
(`bot.oncall`) looked up with `users.lookupByEmail`, cached for a minute.

Fails closed: a schedule that cannot be read, or whose people Slack cannot look up, has nobody on
call (never "anyone"), and says so once per outage in the log, naming the schedule.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.bot.oncall import OnCallReader, ScheduleUnreadable
from signoff.runtime.people import Schedule

log = logging.getLogger("signoff.bot.slack.on_call")

RETRY_SECONDS = 5.0
"""How long an unreadable schedule stays unread before the next look (a click waits on each look)."""


@dataclass(frozen=True)
class OnCallNow:
    """Who `schedule` has on call, as Slack users; `readable` False: nobody, as it could not be read."""

    schedule: Schedule
    users: tuple[str, ...] = ()
    readable: bool = True


class OnCall:
    """`now(schedule)`: who is on call, cached for `cache_seconds` by `clock` (seconds, any epoch)."""

    def __init__(self, reader: OnCallReader | None, client: WebClient, *, cache_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reader, self._client = reader, client
        self._cache_seconds, self._clock = cache_seconds, clock
        self._known: dict[Schedule, tuple[float, OnCallNow]] = {}
        self._down: set[Schedule] = set()
        self._lock = threading.Lock()

    def now(self, schedule: Schedule) -> OnCallNow:
        """Who `schedule` has on call now (as it stood at most `cache_seconds` ago)."""
        now = self._clock()
        with self._lock:
            known = self._known.get(schedule)
        if known is not None:
            kept_for = self._cache_seconds if known[1].readable else min(RETRY_SECONDS, self._cache_seconds)
            if now - known[0] < kept_for:
                return known[1]
        found = self._read(schedule)
        with self._lock:
            self._known[schedule] = (now, found)
        return found

    def _read(self, schedule: Schedule) -> OnCallNow:
        try:
            if self._reader is None:
                raise ScheduleUnreadable("no on-call service is configured")
            users = self._slack_users(self._reader.emails(schedule))
        except ScheduleUnreadable as exc:
            self._told_down(schedule, str(exc))
            return OnCallNow(schedule, readable=False)
        self._told_up(schedule)
        return OnCallNow(schedule, users)

    def _slack_users(self, emails: tuple[str, ...]) -> tuple[str, ...]:
        users: list[str] = []
        for email in emails:
            try:
                users.append(str(self._client.users_lookupByEmail(email=email)["user"]["id"]))
            except SlackApiError as exc:
                if exc.response.get("error") != "users_not_found":
                    raise ScheduleUnreadable(
                        f"Slack could not look up its people: {exc.response.get('error')}") from None
                # Someone on call without a Slack account in this workspace cannot click; the rest can.
                log.info("a person on call has no Slack user with their email")
            except OSError as exc:
                raise ScheduleUnreadable(f"Slack could not look up its people: {exc}") from None
        return tuple(dict.fromkeys(users))

    def _told_down(self, schedule: Schedule, why: str) -> None:
        with self._lock:
            first = schedule not in self._down
            self._down.add(schedule)
        if first:
            log.warning("on-call schedule %s cannot be read (%s): nobody from it may approve until it can",
                        schedule, why)

    def _told_up(self, schedule: Schedule) -> None:
        with self._lock:
            was_down = schedule in self._down
            self._down.discard(schedule)
        if was_down:
            log.info("on-call schedule %s can be read again", schedule)
