"""The console's cookies: who is signed in (and when they last authenticated at the issuer), and a
sign-in under way (its state, nonce and PKCE verifier), each signed with a key derived from the
client secret, so any replica reads the other's. Pure but for the clock and random tokens.

Cookies are HttpOnly and SameSite=Lax (a link from Slack to an approval's page still arrives signed
in), and Secure when the public URL is https. Every form carries the session's CSRF token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

SESSION_COOKIE = "signoff_session"
LOGIN_COOKIE = "signoff_login"
SESSION_SECONDS = 8 * 3600
"""A console session lasts a working day; step-up asks for a fresher sign-in where a rule says so."""
LOGIN_SECONDS = 600
"""A sign-in must come back from the issuer within this."""


@dataclass(frozen=True)
class Session:
    """A signed-in person: their Slack user id, the issuer's subject and name for them, when they
    authenticated at the issuer (`auth_time`, None if it did not say), and the session's CSRF token."""

    user: str
    subject: str
    name: str
    auth_time: int | None
    csrf: str

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "sub": self.subject, "name": self.name, "auth_time": self.auth_time,
                "csrf": self.csrf}

    @classmethod
    def from_json(cls, data: Any) -> Session | None:
        if not isinstance(data, dict):
            return None
        user, subject, name, auth_time, csrf = (data.get(k) for k in ("user", "sub", "name", "auth_time", "csrf"))
        if not (isinstance(user, str) and user and isinstance(subject, str) and subject and isinstance(csrf, str)
                and csrf and isinstance(name, str)):
            return None
        if auth_time is not None and (not isinstance(auth_time, int) or isinstance(auth_time, bool)):
            return None
        return cls(user, subject, name, auth_time, csrf)

    def csrf_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(self.csrf.encode(), str(given).encode())


class Signer:
    """Signs and checks cookie values: base64 JSON, an expiry, and an HMAC-SHA256 over both, per purpose."""

    def __init__(self, secret: str, clock: Any = time.time) -> None:
        self._key = hmac.new(secret.encode(), b"signoff console cookies v1", hashlib.sha256).digest()
        self._clock = clock

    def sign(self, purpose: str, value: dict[str, Any], lasting: int) -> str:
        body = base64.urlsafe_b64encode(json.dumps(
            {"v": value, "exp": int(self._clock()) + lasting}, separators=(",", ":")).encode()).decode().rstrip("=")
        return f"{body}.{self._mac(purpose, body)}"

    def read(self, purpose: str, cookie: str | None) -> dict[str, Any] | None:
        """The value signed for `purpose`, or None: absent, forged, for another purpose, or expired."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, mac = cookie.split(".")
        if not hmac.compare_digest(mac.encode(), self._mac(purpose, body).encode()):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("exp"), int) or data["exp"] < self._clock():
            return None
        value = data.get("v")
        return value if isinstance(value, dict) else None

    def _mac(self, purpose: str, body: str) -> str:
        return hmac.new(self._key, f"{purpose}.{body}".encode(), hashlib.sha256).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def cookie_header(name: str, value: str, *, secure: bool, max_age: int) -> tuple[str, str]:
    """A Set-Cookie header scoped to the console (`/ui/`); `max_age` 0 deletes it."""
    flags = f"; Path=/ui/; Max-Age={max_age}; HttpOnly; SameSite=Lax" + ("; Secure" if secure else "")
    return ("Set-Cookie", f"{name}={value}{flags}")


def read_cookies(header: str) -> dict[str, str]:
    """The request's cookies by name (the first of each name)."""
    cookies: dict[str, str] = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name and name not in cookies:
            cookies[name] = value
    return cookies
