"""The WSGI app in front of Bolt: the routes (Slack's, the probes, `/metrics`), what a request must
be before Bolt reads it, and how long each took to answer.

A body is read within a deadline, and only a few late bodies are awaited at once, so senders that
trickle their bytes cannot hold every server thread. It is then screened, because Bolt parses a
body before it verifies its signature and assumes Slack's shapes (`bot.slack.screening.screen_request`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from slack_bolt import App, BoltContext, BoltRequest, BoltResponse
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.adapter.wsgi.http_request import WsgiHttpRequest
from slack_bolt.request.internals import build_context

from signoff.bot.slack.screening import screen_request

if TYPE_CHECKING:
    from signoff.bot.observe.metrics import Metrics

log = logging.getLogger("signoff.bot.slack.wsgi")

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
"""Liveness: the process works (the database is not asked)."""
READY_PATH = "/readyz"
"""Readiness: the database answers and Slack takes the token."""
METRICS_PATH = "/metrics"
API_PREFIX = "/v1/"
MCP_PATH = "/mcp"
"""The MCP gateway over Streamable HTTP (`bot.gateway.http`), with `SIGNOFF_GATEWAY_CONFIG`."""
"""The approval API's routes (`bot.api`)."""
CONSOLE_PREFIX = "/ui/"
"""The web console's pages (`bot.console`); not found while it is off."""
SOCKET_KEYS = ("gunicorn.socket", "signoff.socket")
"""Where gunicorn, and `http_server` below, put the client's socket in the WSGI environ."""

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class BodyLimits:
    """How much of a request body, how slowly, and how many slow ones at once."""

    max_bytes: int = 1_000_000
    """Slack's payloads are a few kilobytes; anything near this is not Slack."""
    deadline_s: float = 3.0
    """Slack gives up on an answer after 3 s, so a body still arriving then is answered 408."""
    late_after_s: float = 0.5
    """Slack's bodies arrive with their headers; one still arriving after this is late."""
    late_slots: int = 8
    """Late bodies awaited at once; one more is answered 503. Well under gunicorn's 32 threads."""


@dataclass(frozen=True)
class Refusal:
    """An HTTP answer given instead of passing the request on."""

    status: str
    reason: str


TOO_LARGE = Refusal("413 Payload Too Large", "request body too large")
TOO_SLOW = Refusal("408 Request Timeout", "the request body did not arrive in time")
TOO_MANY_SLOW = Refusal("503 Service Unavailable", "too many slow requests; try again")
BAD_LENGTH = Refusal("400 Bad Request", "the Content-Length is not a number of bytes")
SHORT_BODY = Refusal("400 Bad Request", "the body is shorter than its Content-Length")


@dataclass
class _Read:
    sock: socket.socket
    started: float
    refusal: Refusal | None = None


class BodyReader:
    """Reads request bodies within `limits`.

    A blocked read cannot be given a deadline from inside (each `recv` of a trickling sender
    returns in time), so a watcher thread shuts the socket's read side when one is due: the read
    then returns short. The watcher runs while reads are in progress, and a little after.
    """

    def __init__(self, limits: BodyLimits | None = None, *, linger_s: float = 2.0) -> None:
        self.limits, self._linger_s = limits or BodyLimits(), linger_s
        self._reads: list[_Read] = []
        self._changed = threading.Condition()
        self._watching = False

    def read_or_status(self, environ: dict[str, Any]) -> bytes | tuple[int, str]:
        """`read`, its refusal as (HTTP status, reason): for an app that answers in its own format."""
        body = self.read(environ)
        return (int(body.status.split()[0]), body.reason) if isinstance(body, Refusal) else body

    def read(self, environ: dict[str, Any]) -> bytes | Refusal:
        """The request's body, or why there is none to pass on."""
        size = _declared_size(environ.get("CONTENT_LENGTH"))
        if isinstance(size, Refusal):
            return size
        if size > self.limits.max_bytes:
            return TOO_LARGE
        if size == 0:
            return b""
        sock = next((environ[key] for key in SOCKET_KEYS if isinstance(environ.get(key), socket.socket)), None)
        if sock is None:  # a server that does not say (tests calling the app directly): nothing to cut
            body: bytes = environ["wsgi.input"].read(size)
            return body if len(body) == size else SHORT_BODY
        read = self._watch(sock)
        try:
            body = environ["wsgi.input"].read(size)
        except OSError:  # the connection broke or timed out under the server's own socket timeout
            body = b""
        finally:
            self._unwatch(read)
        if len(body) == size:
            return body
        return read.refusal or SHORT_BODY

    def _watch(self, sock: socket.socket) -> _Read:
        read = _Read(sock, time.monotonic())
        with self._changed:
            self._reads.append(read)
            if not self._watching:
                self._watching = True
                threading.Thread(target=self._watcher, name="signoff-body-deadlines", daemon=True).start()
            self._changed.notify()
        return read

    def _unwatch(self, read: _Read) -> None:
        with self._changed:
            self._reads.remove(read)

    def _watcher(self) -> None:
        idle_since: float | None = None
        with self._changed:
            while True:
                now = time.monotonic()
                if self._reads:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                elif now - idle_since >= self._linger_s:
                    self._watching = False
                    return
                self._changed.wait(self._cut_due(now))

    def _cut_due(self, now: float) -> float:
        """Cut the reads that are overdue, or late beyond the slots; seconds until the next may be."""
        limits = self.limits
        late = [r for r in self._reads if r.refusal is None and now - r.started >= limits.late_after_s]
        for read in late:
            if now - read.started >= limits.deadline_s:
                _cut(read, TOO_SLOW)
        # The oldest late reads keep their slots; a newly late one finds them taken and is turned away.
        for read in [r for r in late if r.refusal is None][limits.late_slots:]:
            _cut(read, TOO_MANY_SLOW)
        moments = [r.started + (limits.deadline_s if now - r.started >= limits.late_after_s else limits.late_after_s)
                   for r in self._reads if r.refusal is None]
        return max(min(moments) - now, 0.01) if moments else self._linger_s


def _cut(read: _Read, refusal: Refusal) -> None:
    read.refusal = refusal
    with contextlib.suppress(OSError):  # the client has gone already
        read.sock.shutdown(socket.SHUT_RD)  # a blocked recv returns b"" at once


def _declared_size(value: Any) -> int | Refusal:
    text = str(value or "0").strip()
    # Digits only, and not so many that `int` refuses them: "-1" would mean "read until EOF".
    if not text.isdigit() or not text.isascii() or len(text) > 12:
        return BAD_LENGTH
    return int(text)


class _FormBodies(SlackRequestHandler):
    """Bolt's WSGI handler, reading every slash command whole.

    Bolt takes a form body in which the text "payload" appears anywhere for an interaction and
    looks for its `payload` field; a slash command such as `/signoff check the webhook payload`
    has none, so Bolt read it as empty and dropped it. Such a body is read again as the plain form
    it is (the signature is still checked over the raw body, which is unchanged).
    """

    def dispatch(self, request: WsgiHttpRequest) -> BoltResponse:
        bolt_request = BoltRequest(body=request.get_body(), query=request.query_string,
                                   headers=request.get_headers())
        if not bolt_request.body and "payload" in bolt_request.raw_body:
            fields = dict(parse_qsl(bolt_request.raw_body, keep_blank_values=True))
            if "payload" not in fields and "command" in fields:
                bolt_request.body = fields
                bolt_request.context = build_context(BoltContext({}), fields)
        return self.app.dispatch(bolt_request)


def make_wsgi(app: App, healthy: Callable[[], bool], *, ready: Callable[[], Mapping[str, str]] | None = None,
              metrics: Metrics | None = None, bodies: BodyReader | None = None, api: WsgiApp | None = None,
              console: WsgiApp | None = None, mcp: WsgiApp | None = None) -> WsgiApp:
    """The WSGI app: Bolt on `POST /slack/events`; `GET /healthz` (`healthy`), `/readyz` (`ready`:
    each check with "ok" or why not), `/metrics` (`metrics`), the approval API under `/v1/` (`api`)
    and the web console under `/ui/` (`console`: 404 without one), the MCP gateway at `/mcp` (`mcp`),
    each answered when given."""
    routes = _Routes(_FormBodies(app, path=EVENTS_PATH), healthy, ready, metrics, bodies or BodyReader(),
                     api, console, mcp)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.monotonic()
        kind, answer = routes.route(environ, start_response)
        if metrics is not None:
            metrics.http_request(kind, time.monotonic() - started)
        return answer

    return application


@dataclass(frozen=True)
class _Routes:
    """What `make_wsgi`'s app answers each request with, and the kind of request it was (for the metrics)."""

    bolt: _FormBodies
    healthy: Callable[[], bool]
    ready: Callable[[], Mapping[str, str]] | None
    metrics: Metrics | None
    bodies: BodyReader
    api: WsgiApp | None
    console: WsgiApp | None
    mcp: WsgiApp | None

    def route(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> tuple[str, Iterable[bytes]]:
        """(the kind of request, for the metrics; the answer)."""
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "")
        if self.api is not None and path.startswith(API_PREFIX):  # its own keys and bodies: not Slack's screening
            return "api", self.api(environ, start_response)
        if self.mcp is not None and path == MCP_PATH:  # the approval API's keys; the MCP SDK reads its bodies
            return "mcp", self.mcp(environ, start_response)
        if path.startswith(CONSOLE_PREFIX) or path == CONSOLE_PREFIX.rstrip("/"):  # its own cookies and forms
            if self.console is None:
                return "console", _answer(start_response, Refusal("404 Not Found", "not found"))
            return "console", self.console(environ, start_response)
        if method in ("GET", "HEAD"):
            probed = self._probe(path, start_response)
            if probed is not None:
                return probed
        if method != "POST":
            return "other", self.bolt(environ, start_response)
        return self._slack(path, environ, start_response)

    def _probe(self, path: str, start_response: Callable[..., Any]) -> tuple[str, Iterable[bytes]] | None:
        """`/healthz`, `/readyz` and `/metrics`, where they are served; else None."""
        if path == HEALTH_PATH:
            ok = self.healthy()
            return "healthz", _json(start_response, ok, {"ok": ok})
        if path == READY_PATH and self.ready is not None:
            checks = self.ready()
            ok = all(said == "ok" for said in checks.values())
            return "readyz", _json(start_response, ok, {"ok": ok, **checks})
        if path == METRICS_PATH and self.metrics is not None:
            page, content_type = self.metrics.exposition()
            start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(page)))])
            return "metrics", [page]
        return None

    def _slack(self, path: str, environ: dict[str, Any],
               start_response: Callable[..., Any]) -> tuple[str, Iterable[bytes]]:
        """A POST for Bolt: its body read within the limits and screened first."""
        received = self.bodies.read(environ)
        if isinstance(received, Refusal):
            log.info("refused a request to %s: %s", path, received.reason)
            return "refused", _answer(start_response, received)
        content_type = environ.get("CONTENT_TYPE", "")
        problem = screen_request(received, content_type, environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP"))
        if problem is not None:
            log.info("refused a request to %s: %s", path, problem.reason)
            return "refused", _answer(start_response, Refusal(problem.status, f"not a Slack request: {problem.reason}"))
        environ["wsgi.input"] = io.BytesIO(received)
        return slack_kind(received, content_type), self.bolt(environ, start_response)


def slack_kind(body: bytes, content_type: str) -> str:
    """What Slack sent: a slash `command`, an `interaction` (a click, a form), an `event`, or `other`."""
    if content_type.split(";")[0].strip().lower() == "application/json":
        return "event"
    fields = {name for name, _ in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)}
    return "interaction" if "payload" in fields else "command" if "command" in fields else "other"


def _json(start_response: Callable[..., Any], ok: bool, answer: dict[str, Any]) -> list[bytes]:
    body = json.dumps(answer).encode()
    start_response("200 OK" if ok else "503 Service Unavailable",
                   [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _answer(start_response: Callable[..., Any], refusal: Refusal) -> list[bytes]:
    body = refusal.reason.encode()
    start_response(refusal.status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Handler(WSGIRequestHandler):
    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        environ["signoff.socket"] = self.connection  # so `BodyReader` can cut a slow body short, as under gunicorn
        return environ

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)


def http_server(wsgi: WsgiApp, host: str = "127.0.0.1", port: int = 0) -> WSGIServer:
    """A threaded wsgiref server: for tests and local development, not for production."""
    return make_server(host, port, wsgi, server_class=_ThreadingWSGIServer, handler_class=_Handler)
