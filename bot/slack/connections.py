"""HTTP connections to the Slack Web API kept open between calls, over one TLS context.

slack_sdk sends each call through `urllib`, which opens a new connection and, for HTTPS, builds a
new TLS context (reading the system's CA bundle) and does a full handshake, then closes it. That
is most of the CPU a Web API call costs, and a run makes several calls. Here a call takes an open
connection to its host if one is idle, and gives it back after reading the answer.

A connection the server has closed while it sat idle is seen (its socket reads as ready: the
server's FIN) and dropped before it is used; one idle longer than `max_idle_s` is dropped
unasked, well inside the idle timeouts of Slack's load balancers. A request is sent again on a
fresh connection only when sending it on a kept one failed, so the server never had all of it; a
connection lost after the request was sent fails the call, as a fresh connection lost then would.
"""

from __future__ import annotations

import http.client
import io
import select
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

Key = tuple[str, str]
"""(scheme, host[:port]) of a connection."""


class KeptConnections:
    """A pool of idle HTTP/1.1 connections by host, shared by the threads of a client."""

    def __init__(self, *, timeout: float, tls: ssl.SSLContext | None = None, max_idle: int = 16,
                 max_idle_s: float = 20.0, clock: Any = time.monotonic) -> None:
        self.timeout, self.max_idle, self.max_idle_s, self._clock = timeout, max_idle, max_idle_s, clock
        self._tls = tls
        self._idle: dict[Key, list[tuple[http.client.HTTPConnection, float]]] = {}
        self._lock = threading.Lock()

    def send(self, url: str, request: urllib.request.Request) -> tuple[int, http.client.HTTPMessage, bytes]:
        """Send `request` to `url`; (status, headers, body). A status of 400 or more raises
        `urllib.error.HTTPError`, as `urllib` does, so that slack_sdk handles it as before."""
        parts = urlsplit(url)
        key = (parts.scheme.lower(), parts.netloc)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = dict(request.header_items())
        while True:
            conn, kept = self._take(key)
            try:
                conn.request(request.get_method(), target, body=request.data, headers=headers)
            except OSError as exc:
                conn.close()
                if kept:  # the server had closed it; it has not seen this request: try a fresh one
                    continue
                raise urllib.error.URLError(exc) from exc  # as urllib raises it (slack_sdk retries it once)
            break
        try:
            response = conn.getresponse()
            body = response.read()
        except BaseException:
            conn.close()
            raise
        self._give_back(key, conn, reusable=not response.will_close)
        if response.status >= 400:
            raise urllib.error.HTTPError(url, response.status, response.reason, response.headers, io.BytesIO(body))
        return response.status, response.headers, body

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for kept in idle.values():
            for conn, _ in kept:
                conn.close()

    def _take(self, key: Key) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection to `key` that is still open, and True; else a new one, and False."""
        now = self._clock()
        while True:
            with self._lock:
                kept = self._idle.get(key)
                conn, since = kept.pop() if kept else (None, 0.0)
            if conn is None:
                return self._open(key), False
            if now - since <= self.max_idle_s and not _closed_by_peer(conn):
                return conn, True
            conn.close()

    def _give_back(self, key: Key, conn: http.client.HTTPConnection, *, reusable: bool) -> None:
        if reusable:
            with self._lock:
                kept = self._idle.setdefault(key, [])
                if len(kept) < self.max_idle:
                    kept.append((conn, self._clock()))
                    return
        conn.close()

    def _open(self, key: Key) -> http.client.HTTPConnection:
        scheme, netloc = key
        if scheme == "https":
            return http.client.HTTPSConnection(netloc, timeout=self.timeout, context=self.tls())
        return http.client.HTTPConnection(netloc, timeout=self.timeout)

    def tls(self) -> ssl.SSLContext:
        """The TLS context every HTTPS connection shares, built on first use (building one reads the
        CA bundle: tens of milliseconds of CPU)."""
        with self._lock:
            if self._tls is None:
                self._tls = default_tls()
            return self._tls


def default_tls() -> ssl.SSLContext:
    """What `http.client` would build for each HTTPS connection: the default context, offering HTTP/1.1."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


def _closed_by_peer(conn: http.client.HTTPConnection) -> bool:
    """An idle connection whose socket reads as ready has been closed by the server (or sent what
    was not asked for): either way it cannot carry another request."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        poll = select.poll()  # unlike select(), not limited to descriptors below 1024
        poll.register(sock, select.POLLIN)
        return bool(poll.poll(0))
    except (OSError, ValueError):
        return True
