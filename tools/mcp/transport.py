"""The SDK's transports for one configured server, with the end of the connection made visible.

A stdio server that exits closes its end; the SDK then fails the calls in flight, but says nothing
while the connection is idle (and `ping` no longer exists in the 2026 protocol). The read stream
the session reads from is wrapped so that its end is noticed the moment it happens, and the
server restarted before the next call needs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, TextIO

import anyio
import httpx2
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from signoff.tools.mcp.config import ServerConfig

HTTP_TIMEOUT_S = 30.0
HTTP_READ_TIMEOUT_S = 300.0
"""The SDK's own defaults: a server may hold a response stream open while a tool runs; each call's
own time limit is enforced above the transport."""


@asynccontextmanager
async def open_transport(server: ServerConfig, errlog: TextIO, on_end: Callable[[], None]
                         ) -> AsyncIterator[TransportStreams]:
    """The read and write streams of a connection to `server`; `on_end()` runs when it ends.

    A stdio server's stderr goes to `errlog` (so its last words can be quoted when it fails).
    """
    if server.command is not None:
        # Only what the entry names is added to the SDK's small default environment (PATH, HOME, ...):
        # Signoff's own secrets never reach a server by accident.
        parameters = StdioServerParameters(command=server.command, args=list(server.args),
                                           env=dict(server.env) or None, cwd=server.cwd)
        async with stdio_client(parameters, errlog=errlog) as (read, write):
            yield _Watched(read, on_end), write
        return
    assert server.url is not None
    http = httpx2.AsyncClient(headers=dict(server.headers),
                              timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S))
    async with http, streamable_http_client(server.url, http_client=http) as (read, write):
        yield _Watched(read, on_end), write


class _Watched:
    """A read stream that calls `on_end()` when it ends (the peer closed it, or it was closed)."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> bool | None:
        await self.aclose()
        return None

    def __getattr__(self, name: str) -> Any:
        # `last_context` and anything else a dispatcher may look for on the SDK's own streams.
        return getattr(self._inner, name)
