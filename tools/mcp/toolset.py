"""An MCP server's tools as `Tool`s: `mcp__<server>__<tool>`, its schema, its gate, a call through the
server's connection that turns every way a call can go wrong into what the model is told."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from signoff.tools.base import TOOL_NAME, Tool, ToolFailed, ToolOutcomeUnknown
from signoff.tools.mcp.config import ServerConfig
from signoff.tools.mcp.connection import (
    ConnectionLost,
    ServerConnection,
    ServerRefused,
    ServerUnavailable,
)
from signoff.tools.mcp.gates import Gate, GateRule, resolve_gate
from signoff.tools.mcp.results import error_text, shaped
from signoff.tools.mcp.schema import InvalidSchema, JsonSchemaArgs


def tool_name(server: str, tool: str) -> str:
    """The name a model calls a server's tool by, as Claude Code names them."""
    return f"mcp__{server}__{tool}"


@dataclass
class ServerTools:
    """What one server contributes: its tools and their gates, and the ones it lists that cannot be used."""

    tools: list[Tool] = field(default_factory=list)
    gates: dict[str, Gate] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def server_tools(connection: ServerConnection, listing: list[dict[str, Any]],
                 rules: Sequence[GateRule] = ()) -> ServerTools:
    """A `Tool` for each tool in `listing` (as the server listed them), each calling through `connection`."""
    config = connection.config
    made = ServerTools()
    for listed in listing:
        server_name = str(listed.get("name", ""))
        name = tool_name(config.name, server_name)
        if not TOOL_NAME.match(name):
            made.skipped.append(f"{server_name!r}: its name cannot be a tool name here "
                                f"({name!r}: letters, digits, '_' or '-', at most 64)")
            continue
        try:
            args = JsonSchemaArgs(listed.get("inputSchema") or {"type": "object"})
        except InvalidSchema as exc:
            made.skipped.append(f"{server_name}: {exc}")
            continue
        gate = resolve_gate(config, server_name, listed.get("annotations"), rules)
        made.gates[name] = gate
        made.tools.append(Tool(
            name, partial(call_tool, connection, server_name, gate.side_effect, gate.timeout_s),
            side_effect=gate.side_effect, idempotent=gate.idempotent, args_schema=args,
            description=_description(listed), timeout_s=gate.timeout_s, redact=gate.redact,
        ))
    return made


def unknown_overrides(config: ServerConfig, listing: list[dict[str, Any]]) -> list[str]:
    """Overrides naming a tool the server does not list: a typo would leave the real tool unguarded."""
    listed = {str(tool.get("name")) for tool in listing}
    return [f"server {config.name}: tools.{name}: the server lists no tool of that name"
            for name in config.tools if name not in listed]


def call_tool(connection: ServerConnection, tool: str, side_effect: bool, timeout_s: float,
              args: dict[str, Any], key: str) -> Any:
    """`Tool.fn` of an MCP tool: the call, with `key` in `_meta`, and its result shaped for the model."""
    server = connection.name
    try:
        outcome = connection.call(tool, args, key, timeout_s)
    except ServerUnavailable as exc:
        raise ToolFailed(f"server {server} is unavailable: {exc}; nothing was sent") from None
    except ConnectionLost as exc:
        if side_effect:
            raise ToolOutcomeUnknown(f"server {server} went away during the call ({exc}); "
                                     "it may or may not have taken effect") from None
        raise ToolFailed(f"server {server} is unavailable: {exc}") from None
    except ServerRefused as exc:
        raise ToolFailed(f"server {server} refused the call: {exc}") from None
    if outcome.is_error:
        raise ToolFailed(error_text(outcome.blocks))
    return shaped(outcome.structured, outcome.blocks)


def _description(listed: dict[str, Any]) -> str:
    """The server's words for a tool: its description, else its title, else its annotations' title.
    They are the server's, so surfaces show them as untrusted text (`signoff.bot.untrusted`)."""
    annotations = listed.get("annotations")
    title = annotations.get("title") if isinstance(annotations, dict) else None
    return str(listed.get("description") or listed.get("title") or title or "").strip()
