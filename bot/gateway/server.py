"""The gateway as an MCP server on stdio, with the SDK's low-level `Server`: `tools/list` answers the
catalog, `tools/call` goes through `Gateway.call`.

Over stdio a client session is the process: each start of the gateway draws a new session id. A
call's idempotency key is that session, the JSON-RPC request id and a digest of the call (its tool
and arguments), so a request the client sends again (the same id, the same call) is the same
approval, and runs at most once; over HTTP, where a client of the 2026 protocol has no session and
starts its ids anew each time it connects, a new call under an old id is a new request.

When an upstream's tools change, the gateway tells its clients: on their `subscriptions/listen`
streams (the 2026 protocol), or with `notifications/tools/list_changed` (the handshake era).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from signoff.bot.gateway.calls import Call, Gateway, refusal
from signoff.bot.gateway.catalog import Catalog
from signoff.client import AsyncSignoff
from signoff.runtime.digests import canonical_json

log = logging.getLogger("signoff.gateway")

SERVER_NAME = "signoff-gateway"
MAX_ID_CHARS = 80
"""A request id longer than this is hashed into the key (the API takes keys of up to 200)."""


Asking = Callable[[ServerRequestContext[Any]], AbstractAsyncContextManager[AsyncSignoff]]
"""The client of the approval API a request's calls are asked with."""
SessionOf = Callable[[ServerRequestContext[Any]], str]
"""The client session a request belongs to, as it goes into idempotency keys."""
Shown = Callable[[ServerRequestContext[Any]], Callable[[str], bool]]
"""Which tools a request's client may see listed, by name (a key sees the tools it may ask about)."""


def idempotency_key(session: str, request_id: Any, tool: str, args: dict[str, Any]) -> str:
    """`mcp-gateway:<session>:<request id>:<call digest>`, the key a call is asked for under."""
    shown = str(request_id)
    if len(shown) > MAX_ID_CHARS:
        shown = "sha256-" + hashlib.sha256(shown.encode()).hexdigest()
    digest = hashlib.sha256(canonical_json({"tool": tool, "args": args}).encode()).hexdigest()[:16]
    return f"mcp-gateway:{session}:{shown}:{digest}"


class ListChanges:
    """Tells the gateway's clients that its tool list changed, from a server's thread."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self.sessions: dict[int, ServerSession] = {}
        """Clients of the handshake era that listed the tools, one a connection (those of 2026
        listen on the bus); gone from here when telling them fails."""
        self._loop: asyncio.AbstractEventLoop | None = None

    def follow(self, catalog: Catalog) -> None:
        """Tell clients of each change of `catalog`, on the running loop."""
        self._loop = asyncio.get_running_loop()
        catalog.listeners.append(self._changed)

    def _changed(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody to tell
                loop.call_soon_threadsafe(lambda: loop.create_task(self._tell()))

    async def _tell(self) -> None:
        await self.bus.publish(ToolsListChanged())
        for connection, session in list(self.sessions.items()):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a client gone meanwhile
                log.info("could not tell a client its tools changed: %s", exc)
                self.sessions.pop(connection, None)

    def listed_by(self, session: ServerSession) -> None:
        """`session` (a proxy the SDK makes per request) listed the tools: keep one per connection."""
        self.sessions[id(getattr(session, "_connection", session))] = session


def gateway_server(catalog: Catalog, asking: Asking, session_of: SessionOf, changes: ListChanges,
                   shown: Shown = lambda ctx: lambda tool: True) -> Server[Any]:
    """The MCP server of the gateway: its tools are the catalog's (those `shown` lets the request's
    client see), each call asked with `asking`."""

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            changes.listed_by(ctx.session)
        may_see = shown(ctx)
        return types.ListToolsResult(tools=[tool for tool in catalog.listed() if may_see(tool.name)])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                        ) -> types.CallToolResult:
        tool = catalog.tools.get(params.name)
        if tool is None:
            return refusal(f"No tool named {params.name!r} here: the gateway offers only the tools it lists.")

        async def progress(waited: float, message: str) -> None:
            await ctx.session.report_progress(waited, None, message)

        args = dict(params.arguments or {})
        call = Call(tool, args, idempotency_key(session_of(ctx), ctx.request_id, tool.name, args),
                    reason=f"{tool.name}, asked for through the MCP gateway{_by(ctx)}")
        async with asking(ctx) as signoff:
            return await Gateway(catalog, signoff).call(call, progress)

    return Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool,
                  on_subscriptions_listen=ListenHandler(changes.bus))


LIST_CHANGES = NotificationOptions(tools_changed=True)


async def serve_stdio(catalog: Catalog, signoff: AsyncSignoff) -> None:
    """Serve one client on stdin and stdout until it closes them, asking `signoff` about each call."""
    changes = ListChanges()
    changes.follow(catalog)
    session = uuid.uuid4().hex[:16]
    server = gateway_server(catalog, lambda ctx: contextlib.nullcontext(signoff), lambda ctx: session, changes)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(LIST_CHANGES))


def _by(ctx: ServerRequestContext[Any]) -> str:
    """` by <client>` when the client said its name (its words, not checked)."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None and params.client_info is not None else ""
    return f" by {name[:60]}" if name else ""
