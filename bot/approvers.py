"""Who may approve: the user ids and user groups in `SIGNOFF_APPROVERS`, groups resolved through Slack.

The runner already refuses a requester approving their own run (unless self-approval is allowed);
this module answers the other half: is this person one of the approvers?
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from runtime.records import RunRecord

log = logging.getLogger("signoff.bot.approvers")

NOT_AN_APPROVER = "you are not one of this workspace's Signoff approvers (SIGNOFF_APPROVERS)"


class Approvers:
    """`may_approve(user, run)` for the runner: None if `user` may approve, else the reason not."""

    def __init__(self, ids: frozenset[str], client: WebClient, *, cache_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.users = frozenset(i for i in ids if not i.startswith("S"))
        self.groups = frozenset(i for i in ids if i.startswith("S"))
        self._client, self._cache_seconds, self._clock = client, cache_seconds, clock
        self._members: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    @property
    def anyone(self) -> bool:
        """No list configured: any member may approve (except the requester, which the runner checks)."""
        return not self.users and not self.groups

    def may_approve(self, user: str, run: RunRecord) -> str | None:
        if self.anyone or user in self.users:
            return None
        if any(user in self.members(group) for group in sorted(self.groups)):
            return None
        return NOT_AN_APPROVER

    def members(self, group: str) -> frozenset[str]:
        """The group's members, from a cache refreshed every `cache_seconds`; empty while Slack fails."""
        now = self._clock()
        with self._lock:
            cached = self._members.get(group)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        try:
            users = frozenset(self._client.usergroups_users_list(usergroup=group)["users"])
        except SlackApiError as exc:
            # Fail closed: someone just removed from the group must not keep approving while Slack is down.
            log.warning("could not resolve user group %s: %s", group, exc.response.get("error"))
            return frozenset()
        except OSError as exc:
            log.warning("could not resolve user group %s: %s", group, exc)
            return frozenset()
        with self._lock:
            self._members[group] = (now, users)
        return users
