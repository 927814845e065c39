"""Who is on call now in a PagerDuty or Opsgenie schedule, by email: the schedule services' REST APIs.

`OnCallReader.emails(schedule)` answers, or raises `ScheduleUnreadable` saying why (no key
configured, an error the service answered, a timeout, an answer of the wrong shape). Mapping the
emails to Slack users, caching and logging are the Slack edge's (`bot.slack.on_call`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, assert_never
from urllib.parse import quote

import httpx

from signoff.runtime.people import Schedule

if TYPE_CHECKING:
    from pydantic import SecretStr

    from signoff.bot.settings import Settings

PAGERDUTY_URL = "https://api.pagerduty.com"
OPSGENIE_URL = "https://api.opsgenie.com"
_PAGE = 100  # PagerDuty's largest page
_PAGES = 10
"""A schedule with more on-call entries than this many pages is read only this far."""


class ScheduleUnreadable(Exception):
    """Who is on call in a schedule could not be found out; the message says why."""


@dataclass(frozen=True)
class OnCallServices:
    """The schedule services' credentials and base URLs (`PAGERDUTY_TOKEN`, `SIGNOFF_PAGERDUTY_URL`,
    `OPSGENIE_API_KEY`, `SIGNOFF_OPSGENIE_URL`); a service without a key has no schedule anyone can read."""

    pagerduty_token: str | None = None
    pagerduty_url: str = PAGERDUTY_URL
    opsgenie_key: str | None = None
    opsgenie_url: str = OPSGENIE_URL
    timeout: float = 3.0
    """Seconds a read may take: a click waits on it, and an unreadable schedule adds nobody anyway."""


class OnCallReader:
    """Reads who is on call now from the service a `Schedule` names."""

    def __init__(self, services: OnCallServices) -> None:
        self.services = services

    def emails(self, schedule: Schedule) -> tuple[str, ...]:
        """The emails of the people `schedule` has on call now (each once, in the service's order)."""
        try:
            match schedule.service:
                case "pagerduty":
                    found = self._pagerduty(schedule.name)
                case "opsgenie":
                    found = self._opsgenie(schedule.name)
                case _:
                    assert_never(schedule.service)
        except httpx.HTTPError as exc:
            raise ScheduleUnreadable(f"{type(exc).__name__}: {exc}") from None
        return tuple(dict.fromkeys(found))

    def _client(self, base_url: str, authorization: str) -> httpx.Client:
        # A client per read: a read a minute per schedule does not need a pool that outlives it.
        return httpx.Client(base_url=base_url, timeout=self.services.timeout,
                            headers={"Authorization": authorization})

    def _pagerduty(self, schedule_id: str) -> list[str]:
        token = self.services.pagerduty_token
        if not token:
            raise ScheduleUnreadable("PAGERDUTY_TOKEN is not set")
        emails: list[str] = []
        offset = 0
        with self._client(self.services.pagerduty_url, f"Token token={token}") as http:
            for _ in range(_PAGES):
                # earliest=true: the entries on call now, one per escalation level; include[]=users
                # puts each user's email in the entry (else it is a bare reference).
                answer = _json(http.get("/oncalls", headers={"Accept": "application/vnd.pagerduty+json;version=2"},
                                        params={"schedule_ids[]": schedule_id, "earliest": "true",
                                                "include[]": "users", "limit": _PAGE, "offset": offset}),
                               _pagerduty_error)
                oncalls = answer.get("oncalls")
                if not isinstance(oncalls, list):
                    raise ScheduleUnreadable("PagerDuty's answer has no list of oncalls")
                emails += [email for entry in oncalls if (email := _pagerduty_email(entry))]
                # The service may hand out fewer than asked for: the next page starts after these.
                offset += len(oncalls)
                if answer.get("more") is not True or not oncalls:
                    break
        return emails

    def _opsgenie(self, name: str) -> list[str]:
        key = self.services.opsgenie_key
        if not key:
            raise ScheduleUnreadable("OPSGENIE_API_KEY is not set")
        with self._client(self.services.opsgenie_url, f"GenieKey {key}") as http:
            # flat=true: the on-call participants as a flat list of their usernames, which are emails.
            answer = _json(http.get(f"/v2/schedules/{quote(name, safe='')}/on-calls",
                                    params={"scheduleIdentifierType": "name", "flat": "true"}), _opsgenie_error)
        data = answer.get("data")
        recipients = data.get("onCallRecipients") if isinstance(data, dict) else None
        if not isinstance(recipients, list) or not all(isinstance(r, str) for r in recipients):
            raise ScheduleUnreadable("Opsgenie's answer has no list of onCallRecipients")
        return [r for r in recipients if "@" in r]


def _json(response: httpx.Response, error: Callable[[Mapping[str, Any]], str | None]) -> Mapping[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not response.is_success:
        said = error(body) if isinstance(body, dict) else None
        raise ScheduleUnreadable(f"HTTP {response.status_code}" + (f": {said}" if said else ""))
    if not isinstance(body, dict):
        raise ScheduleUnreadable("the answer is not a JSON object")
    return body


def _pagerduty_error(body: Mapping[str, Any]) -> str | None:
    """`{"error": {"message": ..., "code": ...}}`, PagerDuty's error form."""
    error = body.get("error")
    if not isinstance(error, dict):
        return None
    return f"{str(error.get('message'))[:200]} (code {error.get('code')})"


def _opsgenie_error(body: Mapping[str, Any]) -> str | None:
    """`{"message": ..., "took": ..., "requestId": ...}`, Opsgenie's error form."""
    message = body.get("message")
    return f"{str(message)[:200]} (request {body.get('requestId')})" if message is not None else None


def _pagerduty_email(entry: object) -> str | None:
    user = entry.get("user") if isinstance(entry, dict) else None
    email = user.get("email") if isinstance(user, dict) else None
    return email if isinstance(email, str) and "@" in email else None


def on_call_reader(settings: Settings) -> OnCallReader:
    """The reader of the schedules `settings` has keys for."""
    def secret(value: SecretStr | None) -> str | None:
        return value.get_secret_value() if value is not None else None

    return OnCallReader(OnCallServices(pagerduty_token=secret(settings.pagerduty_token),
                                       pagerduty_url=settings.pagerduty_url,
                                       opsgenie_key=secret(settings.opsgenie_api_key),
                                       opsgenie_url=settings.opsgenie_url))
