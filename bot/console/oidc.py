"""Sign-in with OpenID Connect: discovery, the authorization code flow with PKCE (S256), state and
nonce, the ID token's signature checked against the issuer's JWKS and its claims (issuer, audience,
expiry, nonce, and `auth_time` where a fresh sign-in was asked for), and the Slack user id the
person is. `authlib` speaks OAuth; `joserfc` (authlib's JOSE library) checks the token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import OAuth2Client
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

SLACK_USER_CLAIM = "https://slack.com/user_id"
"""Sign in with Slack's claim of the person's Slack user id."""
SLACK_TEAM_CLAIM = "https://slack.com/team_id"
SCOPE = "openid email profile"
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""Signatures an ID token may have: asymmetric only, so a token signed with the client secret is refused."""
LEEWAY_S = 60
"""Clock skew allowed between the issuer and Signoff, on expiry and `auth_time`."""
DISCOVERY_S = 3600
"""How long the issuer's discovery document and keys are kept before they are read again."""


class SignInError(Exception):
    """A sign-in that cannot be taken; the message is shown to the person."""


@dataclass(frozen=True)
class Endpoints:
    """What the issuer's discovery document says, as used here."""

    authorization: str
    token: str
    jwks: str
    userinfo: str | None
    token_auth: str
    """`client_secret_basic`, or `client_secret_post` where the issuer takes only that."""


@dataclass(frozen=True)
class Started:
    """A sign-in sent to the issuer: where to send the browser, and what to keep until it returns."""

    url: str
    kept: dict[str, Any]


class Issuer:
    """One OpenID Connect issuer and Signoff's client at it."""

    def __init__(self, issuer: str, client_id: str, client_secret: str, redirect_uri: str, *,
                 clock: Callable[[], float] = time.time, timeout: float = 10.0) -> None:
        self.issuer, self.client_id, self.redirect_uri = issuer.rstrip("/"), client_id, redirect_uri
        self._secret, self._clock, self._timeout = client_secret, clock, timeout
        self._endpoints: tuple[float, Endpoints] | None = None
        self._keys: tuple[float, KeySet] | None = None
        self._lock = threading.Lock()

    def start(self, *, max_age: int | None = None) -> Started:
        """The authorization request (code flow, PKCE S256, state, nonce); `max_age`: the person
        must have authenticated within that many seconds (with `prompt=login`: sign in again now)."""
        endpoints = self.endpoints()
        state, nonce, verifier = generate_token(32), generate_token(32), generate_token(64)
        fresh: dict[str, Any] = {"max_age": max_age, "prompt": "login"} if max_age is not None else {}
        with self._client(endpoints) as oauth:
            url, _ = oauth.create_authorization_url(endpoints.authorization, state=state, nonce=nonce,
                                                     code_verifier=verifier, **fresh)
        return Started(url, {"state": state, "nonce": nonce, "verifier": verifier, "max_age": max_age,
                             "at": int(self._clock())})

    def finish(self, kept: Mapping[str, Any], query: Mapping[str, str]) -> dict[str, Any]:
        """The verified claims of the person the issuer sent back with `query`, for the sign-in `kept`."""
        if query.get("error"):
            raise SignInError(f"the issuer refused the sign-in: {query.get('error_description') or query['error']}")
        if not query.get("state") or query.get("state") != kept.get("state"):
            raise SignInError("this sign-in does not match the one this browser started; sign in again")
        if not query.get("code"):
            raise SignInError("the issuer sent no authorization code")
        endpoints = self.endpoints()
        try:
            with self._client(endpoints) as oauth:
                token = oauth.fetch_token(endpoints.token, code=query["code"], code_verifier=kept["verifier"])
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise SignInError(f"the issuer did not exchange the code ({type(exc).__name__})") from None
        id_token = token.get("id_token") if isinstance(token, dict) else None
        if not isinstance(id_token, str):
            raise SignInError("the issuer sent no ID token")
        claims = self.verify(id_token, nonce=str(kept.get("nonce")), max_age=kept.get("max_age"))
        if endpoints.userinfo and not (SLACK_USER_CLAIM in claims or "email" in claims):
            claims = {**self._userinfo(endpoints.userinfo, token.get("access_token"), claims["sub"]), **claims}
        return claims

    def verify(self, id_token: str, *, nonce: str, max_age: int | None) -> dict[str, Any]:
        """The ID token's claims, its signature checked against the issuer's keys and its claims
        against this sign-in; raises `SignInError`."""
        try:
            decoded = self._decode(id_token)
            now = int(self._clock())
            registry = jwt.JWTClaimsRegistry(
                now=now, leeway=LEEWAY_S, iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.client_id}, sub={"essential": True},
                exp={"essential": True}, iat={"essential": True}, nonce={"essential": True, "value": nonce},
                auth_time={"essential": max_age is not None})
            registry.validate(decoded.claims)
        except (JoseError, ValueError) as exc:
            raise SignInError(f"the ID token was refused: {exc}") from None
        claims = dict(decoded.claims)
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.client_id:
            raise SignInError("the ID token was refused: it is for several clients and not authorised for this one")
        auth_time = claims.get("auth_time")
        if auth_time is not None and (not isinstance(auth_time, int) or isinstance(auth_time, bool)):
            raise SignInError("the ID token was refused: its auth_time is not a time")
        if max_age is not None and auth_time is not None and auth_time + max_age + LEEWAY_S < now:
            raise SignInError("the issuer did not ask you to sign in again: your sign-in there is too old")
        return claims

    def _decode(self, id_token: str) -> jwt.Token:
        try:
            return jwt.decode(id_token, self.keys(), algorithms=list(ALGORITHMS))
        except JoseError:
            # The issuer may have rotated its keys since they were read: read them once more.
            return jwt.decode(id_token, self.keys(refresh=True), algorithms=list(ALGORITHMS))

    def endpoints(self) -> Endpoints:
        with self._lock:
            if self._endpoints is not None and self._clock() - self._endpoints[0] < DISCOVERY_S:
                return self._endpoints[1]
        found = self._get(f"{self.issuer}/.well-known/openid-configuration")
        if str(found.get("issuer", "")).rstrip("/") != self.issuer:
            raise SignInError("the issuer's discovery document names another issuer")
        try:
            methods = found.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
            endpoints = Endpoints(str(found["authorization_endpoint"]), str(found["token_endpoint"]),
                                  str(found["jwks_uri"]), found.get("userinfo_endpoint"),
                                  "client_secret_basic" if "client_secret_basic" in methods else "client_secret_post")
        except KeyError as exc:
            raise SignInError(f"the issuer's discovery document has no {exc.args[0]}") from None
        with self._lock:
            self._endpoints = (self._clock(), endpoints)
        return endpoints

    def keys(self, refresh: bool = False) -> KeySet:
        with self._lock:
            if not refresh and self._keys is not None and self._clock() - self._keys[0] < DISCOVERY_S:
                return self._keys[1]
        try:
            keys = KeySet.import_key_set(self._get(self.endpoints().jwks))  # type: ignore[arg-type]
        except (JoseError, ValueError) as exc:
            raise SignInError(f"the issuer's keys cannot be read: {exc}") from None
        with self._lock:
            self._keys = (self._clock(), keys)
        return keys

    def _userinfo(self, url: str, access_token: Any, subject: str) -> dict[str, Any]:
        found = self._get(url, token=str(access_token or ""))
        if found.get("sub") != subject:  # OpenID Connect Core 5.3.2: a mismatch is never used
            raise SignInError("the issuer's userinfo is of another person")
        return found

    def _get(self, url: str, token: str | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = httpx.get(url, headers=headers, timeout=self._timeout, follow_redirects=False)
            response.raise_for_status()
            found = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise SignInError(f"the issuer cannot be reached ({type(exc).__name__})") from None
        if not isinstance(found, dict):
            raise SignInError("the issuer answered something other than a JSON object")
        return found

    def _client(self, endpoints: Endpoints) -> OAuth2Client:
        return OAuth2Client(self.client_id, self._secret, token_endpoint_auth_method=endpoints.token_auth,
                            scope=SCOPE, redirect_uri=self.redirect_uri, code_challenge_method="S256",
                            timeout=self._timeout)


EmailLookup = Callable[[str], str | None]
"""email -> the Slack user id with that email (`users.lookupByEmail`), or None."""


def slack_user(claims: Mapping[str, Any], lookup: EmailLookup, team: str | None = None) -> str:
    """The Slack user id the signed-in person is: Sign in with Slack's own claim (of this workspace,
    `team`, where it says one), or else the Slack user with the issuer's verified email."""
    user = claims.get(SLACK_USER_CLAIM)
    if isinstance(user, str) and user:
        their_team = claims.get(SLACK_TEAM_CLAIM)
        if team and isinstance(their_team, str) and their_team != team:
            raise SignInError("you signed in to another Slack workspace than the one Signoff is installed in")
        return user
    email = claims.get("email")
    if not isinstance(email, str) or not email or claims.get("email_verified") is False:
        raise SignInError("the issuer gave no verified email to find you in Slack by")
    found = lookup(email)
    if not found:
        raise SignInError(f"no one in Slack has the email {email}")
    return found
