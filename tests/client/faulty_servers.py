"""A STAND-IN for Signoff's HTTP approval API (issue #30), whose real server is not built yet.

It speaks the contract the client and the Claude Code hook are written against, and nothing more:
Bearer API keys (401 when missing, wrong or revoked; 403 for a tool outside the key's scope), JSON
refusals `{"error": {"code", "message"}}`, `POST /v1/approvals` (201; the same key and content again:
200 and the same approval; other content: 409), `GET /v1/approvals/{id}?wait=N` (a long poll, N at
most 60), `POST /v1/approvals/{id}/start` (once; then 409 with the status) and `.../outcome` (once).
The policy is a function the test gives; "ask" leaves the approval pending until the test decides it
(`decide`), as a person would in Slack.

Tests that use it are to move to the real server once it exists.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Policy = Callable[[str, dict[str, Any]], tuple[str, str | None]]
"""(tool, args) -> ("allow" | "deny" | "ask", reason)."""

FIELDS = ("reason", "requester", "channel", "preview", "ttl", "description", "side_effect")


def ask_every_time(tool: str, args: dict[str, Any]) -> tuple[str, str | None]:
    return "ask", None


@dataclass
class Stored:
    """One approval, as the stand-in keeps it."""

    id: str
    api_key: str
    key: str
    tool: str
    args: dict[str, Any]
    request: dict[str, Any]
    status: str = "pending"
    decided_by: str | None = None
    reason: str | None = None
    expires_at: str = ""
    outcome: dict[str, Any] | None = None
    starts: int = 0

    def answer(self) -> dict[str, Any]:
        digest = hashlib.sha256(json.dumps([self.tool, self.args], sort_keys=True).encode()).hexdigest()
        body: dict[str, Any] = {"id": self.id, "status": self.status, "args": self.args, "digest": digest,
                                "expires_at": self.expires_at}
        if self.decided_by is not None:
            body["decided_by"] = self.decided_by
        if self.reason is not None:
            body["reason"] = self.reason
        return body


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class ApprovalStandIn:
    """The stand-in server: `with ApprovalStandIn(keys={"k": None}) as api: api.url ...`.

    `keys` maps each valid API key to the tools it may ask for (None: any); `revoked` keys answer 401.
    """

    keys: dict[str, set[str] | None] = field(default_factory=lambda: {"sk-test": None})
    revoked: set[str] = field(default_factory=set)
    policy: Policy = ask_every_time
    seen: list[Seen] = field(default_factory=list)
    approvals: dict[str, Stored] = field(default_factory=dict)
    hang: bool = False
    """When set, a long poll never answers (until the stand-in closes): a server that hangs."""
    hold: float | None = None
    """When set, a long poll answers after at most this many seconds, whatever `wait` asked (the
    contract says "up to N seconds"), so a test sees a client poll again."""

    def __post_init__(self) -> None:
        self.changed = threading.Condition()
        self.closing = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> ApprovalStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.changed:  # end long polls, so the server's threads end
            self.closing = True
            self.changed.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # What a test does in place of a person -------------------------------------------------------

    def wait_for_pending(self, timeout: float = 60.0) -> Stored:
        """The first approval still pending, once there is one (fails after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                pending = [a for a in self.approvals.values() if a.status == "pending"]
                if pending:
                    return pending[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no pending approval within {timeout} s; requests: "
                                         f"{[(s.method, s.path) for s in self.seen]}")
                self.changed.wait(left)

    def decide(self, approval_id: str, status: str, *, by: str = "U_ALICE", reason: str | None = None,
               args: dict[str, Any] | None = None) -> None:
        """A person's decision: "approved" (maybe with edited `args`), "denied" or "expired"."""
        with self.changed:
            approval = self.approvals[approval_id]
            assert approval.status == "pending", approval.status
            approval.status, approval.decided_by, approval.reason = status, by, reason
            if args is not None:
                approval.args = args
            self.changed.notify_all()

    def requests_to(self, method: str, suffix: str = "") -> list[Seen]:
        return [s for s in self.seen if s.method == method and urlsplit(s.path).path.endswith(suffix)]

    # The API ---------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        with self.changed:
            self.seen.append(Seen(method, path, headers, body))
            self.changed.notify_all()
        parts = urlsplit(path)
        segments = [s for s in parts.path.split("/") if s]
        if segments[:2] != ["v1", "approvals"]:
            return 404, _error("not_found", f"{method} {parts.path}")
        api_key = headers.get("authorization", "").removeprefix("Bearer ").strip()
        if api_key not in self.keys or api_key in self.revoked:
            return 401, _error("unauthorized", "a valid API key is required (Authorization: Bearer)")
        if method == "POST" and len(segments) == 2:
            return self._create(api_key, body)
        if len(segments) < 3 or segments[2] not in self.approvals or self.approvals[segments[2]].api_key != api_key:
            return 404, _error("not_found", "no such approval")
        approval = self.approvals[segments[2]]
        if method == "GET" and len(segments) == 3:
            wait = min(60, int((parse_qs(parts.query).get("wait") or ["0"])[0]))
            return 200, self._wait(approval, wait)
        if method == "POST" and segments[3:] == ["start"]:
            return self._start(approval)
        if method == "POST" and segments[3:] == ["outcome"]:
            return self._outcome(approval, body)
        return 404, _error("not_found", f"{method} {parts.path}")

    def _create(self, api_key: str, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("tool"), str) or \
                not isinstance(body.get("args"), dict) or not isinstance(body.get("key"), str) or not body["key"]:
            return 400, _error("invalid_request", "tool, args (an object) and key are required")
        scope = self.keys[api_key]
        if scope is not None and body["tool"] not in scope:
            return 403, _error("forbidden", f"the tool {body['tool']} is outside this key's scope")
        content = {name: body.get(name) for name in ("tool", "args", *FIELDS)}
        with self.changed:
            for approval in self.approvals.values():
                if approval.api_key == api_key and approval.key == body["key"]:
                    if approval.request != content:
                        return 409, _error("idempotency_conflict",
                                           "this key was used for another request")
                    return 200, approval.answer()
            decision, reason = self.policy(body["tool"], body["args"])
            status = {"allow": "approved", "deny": "denied", "ask": "pending"}[decision]
            ttl = body.get("ttl") if isinstance(body.get("ttl"), int) else 3600
            approval = Stored(id=f"apr_{len(self.approvals) + 1:04d}", api_key=api_key, key=body["key"],
                              tool=body["tool"], args=dict(body["args"]), request=content, status=status,
                              decided_by=None if decision == "ask" else "policy", reason=reason,
                              expires_at=(datetime.now(UTC) + timedelta(seconds=ttl)).isoformat())
            self.approvals[approval.id] = approval
            self.changed.notify_all()
            return 201, approval.answer()

    def _wait(self, approval: Stored, wait: int) -> dict[str, Any]:
        deadline = time.monotonic() + (wait if self.hold is None else min(wait, self.hold))
        with self.changed:
            while (approval.status == "pending" or self.hang) and not self.closing:
                if self.hang:
                    self.changed.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            return approval.answer()

    def _start(self, approval: Stored) -> tuple[int, Any]:
        with self.changed:
            approval.starts += 1
            if approval.status != "approved":
                refusal = _error("not_startable", f"the approval is {approval.status}")
                refusal["error"]["status"] = approval.status
                return 409, refusal
            approval.status = "started"
            self.changed.notify_all()
            return 200, {**approval.answer(), "key": approval.key}

    def _outcome(self, approval: Stored, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
            return 400, _error("invalid_request", "ok (a boolean) is required")
        with self.changed:
            if approval.status != "started":
                refusal = _error("not_started", f"the approval is {approval.status}")
                refusal["error"]["status"] = approval.status
                return 409, refusal
            approval.outcome = body
            approval.status = "succeeded" if body["ok"] else "failed"
            self.changed.notify_all()
            return 200, approval.answer()


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _handler(api: ApprovalStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {name.lower(): value for name, value in self.headers.items()}
            status, answer = api.handle(self.command, self.path, headers, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

    return Handler


@dataclass
class Garbage:
    """A server that answers every request with `status` and `body` as they are (not the contract)."""

    status: int = 500
    body: bytes = b"<html>Internal Server Error</html>"
    content_type: str = "text/html"
    seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        garbage = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                garbage.seen.append(f"{self.command} {self.path}")
                self.send_response(garbage.status)
                self.send_header("content-type", garbage.content_type)
                self.send_header("content-length", str(len(garbage.body)))
                self.end_headers()
                self.wfile.write(garbage.body)

            do_GET = do_POST = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> Garbage:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"


@contextmanager
def person(api: ApprovalStandIn, decide: Callable[[Stored], None]) -> Iterator[None]:
    """A person deciding the first pending approval, in another thread, while the block runs."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            decide(api.wait_for_pending(timeout=60))
        except BaseException as exc:  # reported in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    thread.join(timeout=60)
    assert not thread.is_alive()
    if failures:
        raise failures[0]
