"""FakePagerDuty and FakeOpsgenie: the on-call APIs Signoff reads, served on 127.0.0.1:0 with their
documented shapes, errors included.

PagerDuty: `GET /oncalls?schedule_ids[]=...&earliest=true&include[]=users`, `Authorization: Token
token=...`, paginated with `offset`/`limit`/`more`; errors are `{"error": {"message", "code"}}`.
Opsgenie: `GET /v2/schedules/{name}/on-calls?scheduleIdentifierType=name&flat=true`, `Authorization:
GenieKey ...`; errors are `{"message", "took", "requestId"}`. Each can be told to fail with a status
(kept until `recover()`), or to be slow.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


class _FakeApi:
    """A JSON API on a free local port; subclasses answer `answer(path, query, authorization)`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, list[str]], str]] = []
        """(path, query, Authorization header) of every request, in order."""
        self.failing: int | None = None
        self.delay = 0.0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> _FakeApi:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True, name="fake-oncall").start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, status: int) -> None:
        """Answer every request with `status` (and the API's error body) until `recover()`."""
        with self._lock:
            self.failing = status

    def recover(self) -> None:
        with self._lock:
            self.failing = None

    def reads(self) -> int:
        with self._lock:
            return len(self.requests)

    def respond(self, path: str, query: dict[str, list[str]], authorization: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append((path, query, authorization))
            failing, delay = self.failing, self.delay
        time.sleep(delay)
        if failing is not None:
            return failing, self.error(failing)
        with self._lock:
            return self.answer(path, query, authorization)

    def answer(self, path: str, query: dict[str, list[str]], authorization: str) -> tuple[int, dict[str, Any]]:
        raise NotImplementedError

    def error(self, status: int) -> dict[str, Any]:
        raise NotImplementedError


class FakePagerDuty(_FakeApi):
    """PagerDuty's REST API: `schedules` maps a schedule id to the emails of who is on call in it now."""

    MESSAGES = {401: ("Unauthorized", 2006), 404: ("Not Found", 2100), 429: ("Rate Limit Exceeded", 2020),
                500: ("Internal Server Error", 2001)}

    def __init__(self, token: str = "pd-test-token", schedules: dict[str, list[str]] | None = None) -> None:
        super().__init__()
        self.token = token
        self.schedules: dict[str, list[str]] = dict(schedules or {})

    def set_on_call(self, schedule_id: str, emails: list[str]) -> None:
        with self._lock:
            self.schedules[schedule_id] = list(emails)

    def error(self, status: int) -> dict[str, Any]:
        message, code = self.MESSAGES.get(status, ("Error", 2000))
        return {"error": {"message": message, "code": code}}

    def answer(self, path: str, query: dict[str, list[str]], authorization: str) -> tuple[int, dict[str, Any]]:
        if authorization != f"Token token={self.token}":
            return 401, self.error(401)
        if path != "/oncalls":
            return 404, self.error(404)
        ids = query.get("schedule_ids[]", [])
        if any(i not in self.schedules for i in ids):
            return 404, self.error(404)
        users = "users" in query.get("include[]", [])
        entries = [_oncall(i, email, users) for i in ids for email in self.schedules[i]]
        limit, offset = int(query.get("limit", ["25"])[0]), int(query.get("offset", ["0"])[0])
        limit = min(limit, self.page_limit)
        return 200, {"oncalls": entries[offset:offset + limit], "limit": limit, "offset": offset,
                     "more": offset + limit < len(entries), "total": None}

    page_limit = 100
    """The largest page this fake hands out (PagerDuty's is 100); tests lower it to see pages turned."""


def _oncall(schedule_id: str, email: str, with_user: bool) -> dict[str, Any]:
    user_id = "P" + "".join(c for c in email.split("@")[0].upper() if c.isalnum())[:6]
    reference = {"id": user_id, "type": "user_reference", "summary": email.split("@")[0],
                 "self": f"https://api.pagerduty.com/users/{user_id}"}
    user = {**reference, "type": "user", "name": reference["summary"], "email": email} if with_user else reference
    return {"escalation_policy": {"id": "PEP1", "type": "escalation_policy_reference", "summary": "Ops"},
            "escalation_level": 1,
            "schedule": {"id": schedule_id, "type": "schedule_reference", "summary": "Primary"},
            "user": user, "start": "2026-12-01T09:00:00Z", "end": "2026-12-08T09:00:00Z"}


class FakeOpsgenie(_FakeApi):
    """Opsgenie's Who Is On Call API: `schedules` maps a schedule name to who is on call in it now."""

    MESSAGES = {401: "Could not authenticate", 404: "No schedule exists with the given name",
                422: "Schedule identifier type is not valid", 429: "You are making too many requests",
                500: "Internal Server Error"}

    def __init__(self, key: str = "og-test-key", schedules: dict[str, list[str]] | None = None) -> None:
        super().__init__()
        self.key = key
        self.schedules: dict[str, list[str]] = dict(schedules or {})
        self._ids = itertools.count(1)

    def set_on_call(self, name: str, emails: list[str]) -> None:
        with self._lock:
            self.schedules[name] = list(emails)

    def error(self, status: int) -> dict[str, Any]:
        return {"message": self.MESSAGES.get(status, "Error"), "took": 0.002, "requestId": self._request_id()}

    def answer(self, path: str, query: dict[str, list[str]], authorization: str) -> tuple[int, dict[str, Any]]:
        if authorization != f"GenieKey {self.key}":
            return 401, self.error(401)
        prefix, suffix = "/v2/schedules/", "/on-calls"
        if not (path.startswith(prefix) and path.endswith(suffix)):
            return 404, self.error(404)
        if query.get("scheduleIdentifierType", ["id"])[0] not in ("id", "name"):
            return 422, self.error(422)
        name = unquote(path[len(prefix):-len(suffix)])
        if query.get("scheduleIdentifierType", ["id"])[0] != "name" or name not in self.schedules:
            return 404, self.error(404)
        flat = query.get("flat", ["false"])[0] == "true"
        people = self.schedules[name]
        data: dict[str, Any] = {"_parent": {"id": f"sched-{name}", "name": name, "enabled": True}}
        if flat:
            data["onCallRecipients"] = list(people)
        else:
            data["onCallParticipants"] = [{"id": f"user-{p}", "name": p, "type": "user"} for p in people]
        return 200, {"data": data, "took": 0.011, "requestId": self._request_id()}

    def _request_id(self) -> str:
        return f"00000000-0000-0000-0000-{next(self._ids):012d}"


def _handler(fake: _FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            status, body = fake.respond(parts.path, parse_qs(parts.query), self.headers.get("Authorization", ""))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
