"""Who can be named as an approver: Slack user ids, user group ids, `*` and on-call schedules. Pure.

Defined once for the policy file, the settings and the Slack edge.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeGuard

if TYPE_CHECKING:
    from signoff.runtime.records import RunRecord

CHANNEL_MEMBERS = "*"
"""As an approver: any member of the channel where the approval is posted."""
SELF_APPROVAL = "you started this run, so someone else has to approve its calls"
MayApprove = Callable[[str, "RunRecord", tuple[str, ...]], str | None]
"""(user, run, approvers) -> None if the user is one of `approvers` (user and group ids, `*`: the
approval channel's members, `pagerduty:`/`opsgenie:` schedules: who is on call now; empty: the
configured approvers), else the reason they are not. The edge answers it (Slack knows who is in a
group or a channel, the schedule's service who is on call)."""
ScheduleService = Literal["pagerduty", "opsgenie"]
ApproverKind = Literal["user", "group", "channel", "schedule"]
APPROVER_FORMS = (f"a Slack user id (U..., W...), a user group id (S...), {CHANNEL_MEMBERS!r} or an on-call "
                  "schedule (pagerduty:<schedule id>, opsgenie:<schedule name>)")
"""What an approver entry may be, for every error message that refuses one."""

_SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,30}")
_USER_GROUP = re.compile(r"S[A-Z0-9]{2,30}")
# A PagerDuty schedule id (P1ABCDE) or an Opsgenie schedule name; no commas (SIGNOFF_APPROVERS is a
# comma-separated list) and no slashes (the name is a path segment of Opsgenie's URL).
_SCHEDULE = re.compile(r"(pagerduty):([A-Z0-9]{2,30})|(opsgenie):([A-Za-z0-9][A-Za-z0-9 _.\-]{0,99})")


@dataclass(frozen=True)
class Schedule:
    """An on-call schedule named as an approver: whoever it has on call now may approve."""

    service: ScheduleService
    name: str
    """PagerDuty's schedule id, or Opsgenie's schedule name."""

    def __str__(self) -> str:
        return f"{self.service}:{self.name}"


def is_slack_user(value: object) -> TypeGuard[str]:
    """Whether `value` looks like a Slack user id (`U...`, or `W...` in Enterprise Grid)."""
    return isinstance(value, str) and _SLACK_USER.fullmatch(value) is not None


def is_user_group(value: object) -> TypeGuard[str]:
    """Whether `value` looks like a Slack user group id (`S...`)."""
    return isinstance(value, str) and _USER_GROUP.fullmatch(value) is not None


def schedule_of(value: object) -> Schedule | None:
    """The on-call schedule `value` names (`pagerduty:P1ABCDE`, `opsgenie:Ops team`), or None."""
    match = _SCHEDULE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    return Schedule("pagerduty", match[2]) if match[1] else Schedule("opsgenie", match[4])


def approver_kind(value: object) -> ApproverKind | None:
    """What an approver entry is, or None when it is none of `APPROVER_FORMS`: the one place that says."""
    if is_slack_user(value):
        return "user"
    if is_user_group(value):
        return "group"
    if value == CHANNEL_MEMBERS:
        return "channel"
    return "schedule" if schedule_of(value) is not None else None
