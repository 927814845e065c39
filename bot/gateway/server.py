"""The gateway as an MCP server on stdio, with the SDK's low-level `Server`: `tools/list` answers the
catalog, `tools/call` goes through `Gateway.call`.

Over stdio a client session is the process: each start of the gateway draws a new session id, and
a call's idempotency key is that id and the JSON-RPC request id, so a request the client sends
again (the same id) is the same approval, and runs at most once.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from signoff.bot.gateway.calls import Call, Gateway, refusal

SERVER_NAME = "signoff-gateway"
MAX_ID_CHARS = 80
"""A request id longer than this is hashed into the key (the API takes keys of up to 200)."""


def idempotency_key(session: str, request_id: Any) -> str:
    """`mcp-gateway:<session>:<request id>`, the key a call is asked for under."""
    shown = str(request_id)
    if len(shown) > MAX_ID_CHARS:
        shown = "sha256-" + hashlib.sha256(shown.encode()).hexdigest()
    return f"mcp-gateway:{session}:{shown}"


def gateway_server(gateway: Gateway, session: str) -> Server[Any]:
    """The MCP server of one client session."""

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=gateway.catalog.listed())

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                        ) -> types.CallToolResult:
        tool = gateway.catalog.tools.get(params.name)
        if tool is None:
            return refusal(f"No tool named {params.name!r} here: the gateway offers only the tools it lists.")

        async def progress(waited: float, message: str) -> None:
            await ctx.session.report_progress(waited, None, message)

        call = Call(tool, dict(params.arguments or {}), idempotency_key(session, ctx.request_id),
                    reason=f"{tool.name}, asked for through the MCP gateway{_by(ctx)}")
        return await gateway.call(call, progress)

    return Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(gateway: Gateway) -> None:
    """Serve one client on stdin and stdout until it closes them."""
    server = gateway_server(gateway, uuid.uuid4().hex[:16])
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _by(ctx: ServerRequestContext[Any]) -> str:
    """` by <client>` when the client said its name (its words, not checked)."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None and params.client_info is not None else ""
    return f" by {name[:60]}" if name else ""
