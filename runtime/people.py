"""Who can be named as an approver: Slack user ids, user group ids and `*`. Pure.

Defined once for the policy file, the settings and the Slack edge.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeGuard

if TYPE_CHECKING:
    from signoff.runtime.records import RunRecord

CHANNEL_MEMBERS = "*"
"""As an approver: any member of the channel where the approval is posted."""
SELF_APPROVAL = "you started this run, so someone else has to approve its calls"
MayApprove = Callable[[str, "RunRecord", tuple[str, ...]], str | None]
"""(user, run, approvers) -> None if the user is one of `approvers` (user and group ids, `*`: the
approval channel's members; empty: the configured approvers), else the reason they are not. The
edge answers it (Slack knows who is in a group or a channel)."""

_SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,30}")
_USER_GROUP = re.compile(r"S[A-Z0-9]{2,30}")


def is_slack_user(value: object) -> TypeGuard[str]:
    """Whether `value` looks like a Slack user id (`U...`, or `W...` in Enterprise Grid)."""
    return isinstance(value, str) and _SLACK_USER.fullmatch(value) is not None


def is_user_group(value: object) -> TypeGuard[str]:
    """Whether `value` looks like a Slack user group id (`S...`)."""
    return isinstance(value, str) and _USER_GROUP.fullmatch(value) is not None
