"""The gateway over Streamable HTTP, at `/mcp` in `signoff serve`, for the servers of
`SIGNOFF_GATEWAY_CONFIG`.

A client authenticates with an approval API key as a bearer token, checked by the approval API's
own check (`ApprovalApi.key_of`: the key's hash, that it is live, its rate limit); a request
without a live key is answered 401 before the MCP server sees it. Each call is then asked of the
approval API with that same key, over HTTP on this process's own port, as any caller asks: the
key's channel, the tools it may ask about and its idempotency keys apply unchanged.

Why a bridge, and which: `signoff serve` is a WSGI app (on gunicorn's threads, or the standard
library's server beside Socket Mode), and the MCP SDK's Streamable HTTP transport is ASGI. a2wsgi
runs the ASGI app on one event loop of its own and hands each WSGI request to it, streaming the
answer back (a call that waits for a person holds one of gunicorn's threads meanwhile, as a long
poll of the approval API does). The SDK's session manager needs a task group for as long as the
app serves: it is entered on that same loop here, where a2wsgi (which runs no ASGI lifespan) cannot.
Serving the ASGI app on a port of its own beside the WSGI one would need a second port to
configure, expose and secure; one port, one key check is simpler to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx
from a2wsgi import ASGIMiddleware
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from signoff.bot.api.requests import ApiError
from signoff.bot.gateway.catalog import Catalog
from signoff.bot.gateway.server import ListChanges, gateway_server
from signoff.client import AsyncSignoff
from signoff.runtime.api_keys import ApiKey

MCP_PATH = "/mcp"
SESSION_HEADER = "mcp-session-id"
MAX_SESSION_CHARS = 40
STOP_WAIT_S = 10.0
ASK_TIMEOUT_S = 10.0

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
KEY_TOOLS_HEADER = "x-signoff-key-tools"
KEY_TOOLS_ENVIRON = "HTTP_X_SIGNOFF_KEY_TOOLS"
"""The checked key's tool globs, handed to the MCP server as a request header the gateway itself sets
(a client's own header of that name is overwritten before the server sees the request)."""
KeyCheck = Callable[[str], ApiKey]
"""`Authorization` header -> the live key it carries; raises `ApiError` (401, 429) otherwise."""


class HttpGateway:
    """The `/mcp` WSGI app and the event loop it serves on; `close` stops both and the servers."""

    def __init__(self, catalog: Catalog, key_of: KeyCheck, signoff_url: str) -> None:
        self.catalog = catalog
        self._key_of = key_of
        self._url = signoff_url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-gateway", daemon=True)
        self._thread.start()
        changes = ListChanges()
        server = gateway_server(catalog, self._asking, _session_of, changes, _shown)
        # No DNS-rebinding screen: it guards servers that trust whoever reaches them, and every
        # request here needs a key, which a page in a browser does not have.
        manager = StreamableHTTPSessionManager(
            app=server, security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        self._serving_now = threading.Event()
        self._stop = asyncio.run_coroutine_threadsafe(self._serving(manager, changes), self._loop)
        self._serving_now.wait(STOP_WAIT_S)  # no request before the session manager runs
        self._asgi = ASGIMiddleware(StreamableHTTPASGIApp(manager), loop=self._loop)  # type: ignore[arg-type]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            key = self._key_of(environ.get("HTTP_AUTHORIZATION", ""))
        except ApiError as refused:
            return _refused(start_response, refused)
        # What the checked key may ask about, for the tool list; set here, over whatever a client sent.
        environ[KEY_TOOLS_ENVIRON] = json.dumps(list(key.tools))
        return self._asgi(environ, start_response)  # type: ignore[arg-type]  # a2wsgi types its environ narrower

    def close(self) -> None:
        """Stop serving (sessions end), then the loop, then the upstream servers."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stopping.set)
            with contextlib.suppress(Exception):
                self._stop.result(STOP_WAIT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STOP_WAIT_S)
        self.catalog.close()

    async def _serving(self, manager: StreamableHTTPSessionManager, changes: ListChanges) -> None:
        self._stopping = asyncio.Event()
        changes.follow(self.catalog)
        async with httpx.AsyncClient(timeout=ASK_TIMEOUT_S) as self._http, manager.run():
            self._serving_now.set()
            await self._stopping.wait()

    @contextlib.asynccontextmanager
    async def _asking(self, ctx: ServerRequestContext[Any]) -> AsyncIterator[AsyncSignoff]:
        """A client of the approval API with the key the request carries (checked on the way in)."""
        _, _, secret = _header(ctx, "authorization").partition(" ")
        # Every key's calls share one pool of connections to the approval API.
        async with AsyncSignoff(self._url, secret.strip(), http=self._http) as signoff:
            yield signoff


def _shown(ctx: ServerRequestContext[Any]) -> Callable[[str], bool]:
    """The tools the request's key may ask about (`KEY_TOOLS_ENVIRON`, put there as the key was checked)."""
    try:
        globs = json.loads(_header(ctx, KEY_TOOLS_HEADER) or "[]")
    except ValueError:
        globs = []
    return lambda tool: any(fnmatch.fnmatchcase(tool, str(glob)) for glob in globs)


def _session_of(ctx: ServerRequestContext[Any]) -> str:
    """`http-<session>` for a client of the handshake era, `http` for one of 2026 (it has none).
    The approval API keeps each key's idempotency keys apart, so clients of other keys never meet."""
    session = _header(ctx, SESSION_HEADER)
    if len(session) > MAX_SESSION_CHARS:
        session = hashlib.sha256(session.encode()).hexdigest()[:MAX_SESSION_CHARS]
    return f"http-{session}" if session else "http"


def _header(ctx: ServerRequestContext[Any], name: str) -> str:
    headers = getattr(ctx.request, "headers", None)
    return str(headers.get(name, "")) if headers is not None else ""


def _refused(start_response: Callable[..., Any], refused: ApiError) -> list[bytes]:
    body = json.dumps(refused.body()).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if refused.status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="signoff"'))
    if refused.retry_after is not None:
        headers.append(("Retry-After", str(max(1, round(refused.retry_after)))))
    reasons = {401: "Unauthorized", 429: "Too Many Requests"}
    start_response(f"{refused.status} {reasons.get(refused.status, 'Error')}", headers)
    return [body]
