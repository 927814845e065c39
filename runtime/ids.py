"""The ids a store gives what it keeps: unguessable, since a button or a link carries them."""

from __future__ import annotations

import secrets


def new_approval_id() -> str:
    return "apr_" + secrets.token_urlsafe(12)


def new_grant_id() -> str:
    return "grt_" + secrets.token_urlsafe(12)
