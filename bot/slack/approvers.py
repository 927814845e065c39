"""Who may decide and who may see a run: `SIGNOFF_APPROVERS` and channel membership, through Slack.

`SIGNOFF_APPROVERS` (and a policy rule's approvers) holds user ids, user group ids (resolved with
`usergroups.users.list`), `*`: any member of the channel where the run's approvals are posted
(`conversations.members`), and on-call schedules: whoever is on call now (`on_call.OnCall`).
The runner adds the rest: a requester never approves their own run unless self-approval is on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.bot.oncall import OnCallReader
from signoff.bot.slack.on_call import OnCall, OnCallNow
from signoff.runtime.people import Schedule, approver_kind, schedule_of
from signoff.runtime.records import RunRecord

log = logging.getLogger("signoff.bot.slack.approvers")

NOT_AN_APPROVER = "you are not one of this workspace's Signoff approvers (SIGNOFF_APPROVERS)"
NOT_NAMED = "you are not one of the approvers this call's policy rule names"
NOT_IN_THE_CHANNEL = "you are not a member of the channel where this run's approvals are posted"
NO_APPROVERS = "no approvers are configured (SIGNOFF_APPROVERS is empty)"
_MEMBERS_PER_PAGE = 999  # the most Slack's cursor pagination hands out at once
_MEMBER_PAGES = 25
"""Channels bigger than this many pages are read only this far: anyone further in is refused."""


class Approvers:
    """`may_approve(user, run, approvers)` and `may_see(user, run)` for the runner.

    Group and channel members, and who is on call, are cached for `cache_seconds` by `clock`; when
    Slack (or the schedule's service) cannot say, nobody is a member (someone just removed must not
    keep approving while Slack is down). `schedules` reads on-call schedules (None: none can be read).
    """

    def __init__(self, ids: frozenset[str], client: WebClient, *, approval_channel: str | None = None,
                 cache_seconds: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 schedules: OnCallReader | None = None) -> None:
        self.ids = ids
        self.approval_channel = approval_channel
        self._client, self._cache_seconds, self._clock = client, cache_seconds, clock
        self._on_call = OnCall(schedules, client, cache_seconds=cache_seconds, clock=clock)
        self._members: dict[tuple[str, str], tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def may_approve(self, user: str, run: RunRecord, approvers: tuple[str, ...] = ()) -> str | None:
        """None if `user` is one of `approvers` (a policy rule's), or of `SIGNOFF_APPROVERS` when
        that is empty, for `run`; else the reason not."""
        named = frozenset(approvers) or self.ids
        # The built-in policy names SIGNOFF_APPROVERS: say so, rather than speak of a rule.
        return self._one_of(user, run, named, NOT_AN_APPROVER if named == self.ids else NOT_NAMED)

    def _one_of(self, user: str, run: RunRecord, ids: frozenset[str], not_one: str) -> str | None:
        kinds = {i: approver_kind(i) for i in sorted(ids)}
        groups = [i for i, kind in kinds.items() if kind == "group"]
        schedules = [s for i, kind in kinds.items() if kind == "schedule" and (s := schedule_of(i))]
        # Cheapest first: a named user needs no call, a group or a schedule one each (then cached).
        if (kinds.get(user) == "user" or any(user in self._group(group) for group in groups)
                or any(user in self.on_call(schedule).users for schedule in schedules)):
            return None
        if "channel" in kinds.values():
            channel = self.approval_channel or run_channel(run)
            return None if channel and user in self._channel(channel) else NOT_IN_THE_CHANNEL
        return not_one if ids else NO_APPROVERS

    def on_call(self, schedule: Schedule) -> OnCallNow:
        """Who `schedule` has on call now, as Slack users (nobody when it cannot be read)."""
        return self._on_call.now(schedule)

    def may_see(self, user: str, run: RunRecord) -> bool:
        """Whether `user` is a member of the channel the run was started in (its messages are there)."""
        channel = run_channel(run)
        return channel is not None and user in self._channel(channel)

    def _group(self, group: str) -> frozenset[str]:
        return self._cached(("group", group), lambda: self._client.usergroups_users_list(usergroup=group)["users"])

    def _channel(self, channel: str) -> frozenset[str]:
        def members() -> list[str]:
            found: list[str] = []
            cursor = None
            for _ in range(_MEMBER_PAGES):
                page = self._client.conversations_members(channel=channel, limit=_MEMBERS_PER_PAGE, cursor=cursor)
                found += page["members"]
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    break
            return found

        return self._cached(("channel", channel), members)

    def _cached(self, key: tuple[str, str], fetch: Callable[[], list[str]]) -> frozenset[str]:
        now = self._clock()
        with self._lock:
            cached = self._members.get(key)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        try:
            members = frozenset(fetch())
        except SlackApiError as exc:
            log.warning("could not list the members of %s %s: %s", *key, exc.response.get("error"))
            return frozenset()
        except OSError as exc:
            log.warning("could not list the members of %s %s: %s", *key, exc)
            return frozenset()
        with self._lock:
            self._members[key] = (now, members)
        return members


def run_channel(run: RunRecord) -> str | None:
    """The channel a run was started in, if it came from Slack."""
    channel = (run.origin or {}).get("channel")
    return channel if isinstance(channel, str) and channel else None
