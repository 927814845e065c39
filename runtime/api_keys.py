"""The approval API's keys: who a request comes from, where its cards go, and what it may ask about.

A key is made by `signoff keys create`, which prints its secret once; only the SHA-256 of the secret
is kept (the secret is 256 random bits, so a fast hash is enough: nothing is there to guess). A
request names its key by the secret (`Authorization: Bearer <secret>`), and the key's name is what
the card, the audit log and `signoff keys list` show. Pure, but for the secret's randomness.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

SECRET_PREFIX = "sk_signoff_"
CALLBACK_SECRET_PREFIX = "whsec_signoff_"
KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
"""A key's name: lower-case letters, digits, `.`, `_` and `-`, as it is shown on cards."""


@dataclass(frozen=True)
class ApiKey:
    """A key as kept: never its secret."""

    name: str
    channel: str
    tools: tuple[str, ...]
    """Globs of the tool names it may ask about (`*`: any)."""
    requester: str | None
    """The Slack user it speaks for: the requester of its runs (None: the key itself)."""
    created_at: datetime
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None
    other_channels: tuple[str, ...] = ()
    """Channels besides `channel` a request may name for its card."""

    @property
    def live(self) -> bool:
        return self.revoked_at is None

    def may_post_to(self, channel: str) -> bool:
        return channel == self.channel or channel in self.other_channels

    def may_ask_about(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, glob) for glob in self.tools)

    @property
    def speaks_for(self) -> str:
        """Who its runs are requested by, as the approval rules see it: the Slack user it was made
        for, or the key (which no person is, so nobody is kept from approving their own request)."""
        return self.requester or f"api:{self.name}"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_callback_secret() -> str:
    """What a key's callbacks are signed with (kept, since Signoff signs with it; shown once)."""
    return CALLBACK_SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyExists(Exception):
    """A key of that name exists (revoked or not: a name is never reused, so the audit log's is one key's)."""


class ApiKeys(Protocol):
    """Where the keys are kept."""

    def create_key(self, key: ApiKey, secret_hash: str, callback_secret: str) -> None:
        """Keep `key` under `secret_hash`, its callbacks signed with `callback_secret`; `KeyExists`
        when the name is taken."""

    def keys(self) -> list[ApiKey]:
        """Every key, revoked ones too, by name."""

    def revoke_key(self, name: str) -> ApiKey | None:
        """Revoke the key (a revoked one stays so); None when there is none of that name."""

    def key_for(self, secret_hash: str) -> ApiKey | None:
        """The key whose secret hashes to `secret_hash`, revoked or not; its use is recorded."""

    def callback_secret(self, name: str) -> str | None:
        """What the key `name`'s callbacks are signed with; None when there is no such key."""
