"""Who can be named as an approver: Slack user ids, user group ids and `*`. Pure.

Defined once for the policy file, the settings and the Slack edge.
"""

from __future__ import annotations

import re
from typing import TypeGuard

CHANNEL_MEMBERS = "*"
"""As an approver: any member of the channel where the approval is posted."""

_SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,30}")
_USER_GROUP = re.compile(r"S[A-Z0-9]{2,30}")


def is_slack_user(value: object) -> TypeGuard[str]:
    """Whether `value` looks like a Slack user id (`U...`, or `W...` in Enterprise Grid)."""
    return isinstance(value, str) and _SLACK_USER.fullmatch(value) is not None


def is_user_group(value: object) -> TypeGuard[str]:
    """Whether `value` looks like a Slack user group id (`S...`)."""
    return isinstance(value, str) and _USER_GROUP.fullmatch(value) is not None
