"""The approval API over HTTP: programs outside Signoff ask for approvals, wait for them, start the
approved call once and report what came of it. Served by `signoff serve` on its port under `/v1`.

Each approval is a run of one call (`runtime.caller_runs`), decided by the same policy, card,
quorum, edits, grants, audit chain and ledger as any run's; this module only speaks HTTP: keys,
JSON, statuses and refusals. What a caller is told is `runtime.caller_status`'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from signoff.bot.api.limits import RateLimit
from signoff.bot.api.openapi import OPENAPI
from signoff.bot.api.requests import (
    MAX_BODY_BYTES,
    MAX_WAIT_S,
    ApiError,
    CreateApproval,
    Outcome,
    not_found,
    parsed,
    unauthorized,
)
from signoff.runtime.api_keys import ApiKey, ApiKeys, secret_hash
from signoff.runtime.caller_runs import CallerCall, Started
from signoff.runtime.caller_status import DECIDED, CallerView, caller_view
from signoff.runtime.digests import canonical_json
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.runner import MAX_GOAL_CHARS, Runner

log = logging.getLogger("signoff.bot.api")

PREFIX = "/v1/"
OPENAPI_PATH = "/v1/openapi.json"
APPROVAL = re.compile(r"^/v1/approvals/(?P<id>run-[0-9a-f]{1,32})(?P<action>/start|/outcome)?$")
WAITING_SLOTS = 16
"""Long polls held at once; one more is answered at once with the status as it is (the client polls
again), so waiting callers can never take every server thread from Slack."""
POLL_S = 0.25
"""How often a long poll reads the approval again when nothing in this process woke it."""
DEFAULT_RATE = 600
"""Requests a key may make a minute (`SIGNOFF_API_RATE`)."""

Body = Callable[[dict[str, Any]], "bytes | tuple[int, str]"]
"""Reads a request's body within limits: the bytes, or why not (an HTTP status and the reason)."""


class RunChanges:
    """Wakes this process's long polls when a run changes here (an Approve click this process
    answered, the worker that handed the call over): an observer of the runner's commits. A change
    made on another replica is seen at the next poll instead."""

    def __init__(self) -> None:
        self._changed = threading.Condition()

    def observe(self, run: RunRecord, events: Sequence[Mapping[str, Any]]) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait(self, seconds: float) -> None:
        with self._changed:
            self._changed.wait(seconds)


class ApprovalApi:
    """The `/v1` routes, as a WSGI app."""

    def __init__(self, runner: Runner, keys: ApiKeys, read_body: Body, limit: RateLimit | None = None,
                 changes: RunChanges | None = None) -> None:
        self.runner, self.keys, self.read_body = runner, keys, read_body
        self.limit = limit or RateLimit(DEFAULT_RATE)
        self.changes = changes or RunChanges()
        self._waiting = threading.BoundedSemaphore(WAITING_SLOTS)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers: list[tuple[str, str]] = []
        try:
            status, answer = self._route(environ)
        except ApiError as refusal:
            status, answer = refusal.status, refusal.body()
            if refusal.retry_after is not None:
                headers.append(("Retry-After", str(max(1, math.ceil(refusal.retry_after)))))
        except Exception:  # a bug must answer as JSON too, and say nothing of itself
            log.exception("approval API: %s %s failed", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            status, answer = 500, ApiError(500, "internal", "Signoff failed to answer; try again").body()
        data = json.dumps(answer).encode()
        start_response(f"{status} {_REASONS.get(status, 'Error')}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *headers])
        return [data]

    def _route(self, environ: dict[str, Any]) -> tuple[int, Any]:
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
        if path == OPENAPI_PATH and method == "GET":
            return 200, OPENAPI
        key = self._key(environ.get("HTTP_AUTHORIZATION", ""))
        if path == "/v1/approvals":
            if method == "GET":  # the approval this key asked for under an idempotency key
                return 200, self._answer(self._run_for_key(key, environ.get("QUERY_STRING", "")))
            if method != "POST":
                raise ApiError(405, "method_not_allowed", "POST /v1/approvals asks for an approval")
            return self._create(key, self._json(environ))
        found = APPROVAL.match(path)
        if found is None:
            raise not_found(f"no such route: {method} {path}")
        run = self._run_of(key, found["id"])
        match method, found["action"]:
            case "GET", None:
                return 200, self._wait(run, _wait_seconds(environ.get("QUERY_STRING", "")))
            case "POST", "/start":
                return self._start(run)
            case "POST", "/outcome":
                return self._outcome(run, parsed(Outcome, self._json(environ)))
        raise ApiError(405, "method_not_allowed", f"{method} is not allowed on {path}")

    # -- who asks ---------------------------------------------------------------------------

    def key_of(self, header: str) -> ApiKey:
        """The live key an `Authorization: Bearer` header carries, as every route checks it (the
        MCP gateway's `/mcp` too); raises `ApiError` (401, or 429 past its rate)."""
        return self._key(header)

    def _key(self, header: str) -> ApiKey:
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise unauthorized()
        key = self.keys.key_for(secret_hash(secret.strip()))
        if key is None or not key.live:
            raise unauthorized()
        wait = self.limit.wait_for(key.name)
        if wait:
            raise ApiError(429, "rate_limited", f"this key made too many requests; try again in {math.ceil(wait)} s",
                           retry_after=wait)
        return key

    def _run_of(self, key: ApiKey, run_id: str) -> RunRecord:
        """The key's own approval: another key's is as good as absent (404), never told apart."""
        run = self.runner.get_run(run_id)
        if run is None or (run.origin.get("api") or {}).get("key") != key.name:
            raise not_found(f"no approval {run_id} for this key")
        return run

    def _run_for_key(self, key: ApiKey, query: str) -> RunRecord:
        """`GET /v1/approvals?key=K`: the approval this key asked for under idempotency key K (a
        caller that knows its key, not the approval's id: a hook reporting how the call went)."""
        asked = (parse_qs(query).get("key") or [""])[0]
        if not asked:
            raise ApiError(400, "invalid_request", "key: the idempotency key the approval was asked for under")
        run = self.runner.store.run_for_request(_request_id(key, asked))
        if run is None:
            raise not_found(f"no approval asked for under the key {asked!r} with this API key")
        return self._run_of(key, run.run_id)

    def _json(self, environ: dict[str, Any]) -> Any:
        body = self.read_body(environ)
        if isinstance(body, tuple):
            status, reason = body
            raise ApiError(status, "invalid_body", reason)
        try:
            return json.loads(body) if body else None
        except ValueError:
            raise ApiError(400, "invalid_json", "the body is not JSON") from None

    # -- the routes -------------------------------------------------------------------------

    def _create(self, key: ApiKey, body: Any) -> tuple[int, Any]:
        request = parsed(CreateApproval, body)
        if not key.may_ask_about(request.tool):
            raise ApiError(403, "forbidden", f"this key may not ask about {request.tool} "
                                             f"(it may ask about {', '.join(key.tools)})")
        channel = request.channel or key.channel
        if not key.may_post_to(channel):
            raise ApiError(403, "forbidden", f"this key's approvals go to {', '.join((key.channel, *key.other_channels))}")
        fingerprint = hashlib.sha256(canonical_json(request.model_dump(mode="json")).encode()).hexdigest()
        call = CallerCall(tool=request.tool, args=request.args, side_effect=request.side_effect,
                          description=request.description, preview=request.preview, timeout_s=request.timeout,
                          ttl_s=request.ttl)
        goal = (request.reason or f"{request.tool}, asked for with the key {key.name}")[:MAX_GOAL_CHARS]
        origin = {"channel": channel, "api": {"key": key.name, "request": fingerprint, "id_key": request.key,
                                                  "requester": request.requester,
                                                  **({"callback_url": request.callback_url} if request.callback_url
                                                     else {})}}
        run, made = self.runner.ask_for_caller(call, goal, key.speaks_for, origin,
                                               request_id=_request_id(key, request.key))
        if not made and (run.origin.get("api") or {}).get("request") != fingerprint:
            raise ApiError(409, "idempotency_conflict",
                           f"the key {request.key!r} was used for another request (approval {run.run_id})")
        if made and request.start:  # only the request that made it: a replay never starts anything
            started = self.runner.start_call(run.run_id)
            if isinstance(started, Started):
                return 201, self._started(run, started)
        return (201 if made else 200), self._answer(run)

    def _wait(self, run: RunRecord, seconds: int) -> dict[str, Any]:
        view, body = self._look(run)
        if view.status in DECIDED or seconds <= 0 or not self._waiting.acquire(blocking=False):
            return body
        try:
            deadline = time.monotonic() + seconds
            while view.status not in DECIDED and time.monotonic() < deadline:
                self.changes.wait(POLL_S)
                view, body = self._look(self.runner.get_run(run.run_id) or run)
        finally:
            self._waiting.release()
        return body

    def _start(self, run: RunRecord) -> tuple[int, Any]:
        started = self.runner.start_call(run.run_id)
        if isinstance(started, Started):
            return 200, self._started(run, started)
        view = self._view(self.runner.get_run(run.run_id) or run)
        raise ApiError(409, "not_startable", f"the approval is {view.status}; only an approved call starts, once",
                       {"status": view.status})

    def _started(self, run: RunRecord, started: Started) -> dict[str, Any]:
        """What the request that started the call is told: the key and arguments to run it with,
        and how long it has to report."""
        return {**self._answer(self.runner.get_run(run.run_id) or run), "key": started.key, "args": started.args,
                "deadline_seconds": started.deadline_s}

    def _outcome(self, run: RunRecord, outcome: Outcome) -> tuple[int, Any]:
        view = self._view(run)
        if view.status != "started":
            raise ApiError(409, "not_started", f"the approval is {view.status}: an outcome is reported once, "
                                               "for a call that was started", {"status": view.status})
        self.runner.report_call(run.run_id, outcome.ok, outcome.result,
                                outcome.error or "the caller reported a failure", outcome.seconds)
        after, body = self._look(self.runner.get_run(run.run_id) or run)
        if after.status == "started":
            raise ApiError(409, "too_late", "the outcome came after the call's time limit: a person is asked "
                                            "whether it took effect", {"status": after.status})
        return 200, body

    # -- what a caller is told --------------------------------------------------------------

    def _look(self, run: RunRecord) -> tuple[CallerView, dict[str, Any]]:
        """What the caller is told of `run` (as read: the caller reads it fresh), and the answer's body."""
        approvals = self.runner.store.list_approvals(run_id=run.run_id, limit=20)
        key = (run.state.get("pending") or {}).get("key")
        rows = self.runner.store.executions(run.run_id)
        execution = next((row for row in reversed(rows) if key is None or row.get("key") == key), None)
        view = caller_view(run, approvals, execution, (run.origin.get("caller") or {}).get("args") or {})
        body: dict[str, Any] = {"id": run.run_id, "status": view.status, "args": view.args}
        if view.decided_by is not None:
            body["decided_by"] = view.decided_by
        if view.reason is not None:
            body["reason"] = view.reason
        if approvals:  # newest first
            body["expires_at"], body["digest"] = approvals[0].expires_at.isoformat(), approvals[0].digest
        receipt = self._receipt(view, approvals, execution)
        if receipt is not None:
            body["receipt"] = receipt
        return view, body

    def _receipt(self, view: CallerView, approvals: Sequence[ApprovalRecord],
                 execution: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The signed receipt of the decision the caller is told of: a person's (its approval's), or,
        once the call started, the rule's or grant's that let it run unasked."""
        if view.status == "pending":
            return None
        decided = next((a for a in approvals if a.status != "superseded"), None)
        if decided is not None and decided.decided_by is not None:
            found = self.runner.store.receipt_of(approval_id=decided.approval_id)
            if found is not None:
                return found
        return self.runner.store.receipt_of(key=execution["key"]) if execution is not None else None

    def _view(self, run: RunRecord) -> CallerView:
        return self._look(run)[0]

    def describe(self, run: RunRecord) -> dict[str, Any]:
        """The approval as `GET /v1/approvals/{id}` answers it (a callback sends the same)."""
        return self._answer(run)

    def _answer(self, run: RunRecord) -> dict[str, Any]:
        return self._look(run)[1]


def _request_id(key: ApiKey, idempotency_key: str) -> str:
    """What makes a replayed ask find the approval it made: the API key's name and the caller's key."""
    return f"api:{key.name}:{idempotency_key}"


def _wait_seconds(query: str) -> int:
    raw = (parse_qs(query).get("wait") or ["0"])[0]
    try:
        return max(0, min(MAX_WAIT_S, int(raw)))
    except ValueError:
        raise ApiError(400, "invalid_request", f"wait: expected whole seconds (at most {MAX_WAIT_S})") from None


_REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large",
            429: "Too Many Requests",
            500: "Internal Server Error"}
__all__ = ["MAX_BODY_BYTES", "ApprovalApi", "PREFIX"]
