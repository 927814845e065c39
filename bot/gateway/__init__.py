"""The MCP gateway: MCP clients call upstream servers' tools through Signoff, which decides each call."""

from signoff.bot.gateway.calls import Call, Gateway
from signoff.bot.gateway.catalog import Catalog, GatewayTool
from signoff.bot.gateway.server import gateway_server, idempotency_key, serve_stdio

__all__ = ["Call", "Catalog", "Gateway", "GatewayTool", "gateway_server", "idempotency_key", "serve_stdio"]
