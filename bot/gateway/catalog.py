"""The tools the gateway offers: every tool of every enabled server of an `mcpServers` file, named,
gated and described exactly as Signoff's MCP toolsets name, gate and describe them.

Nothing here decides a rule of its own: the names (`mcp__<server>__<tool>`), the schemas, the gates
(annotations, overrides, defaults) come from `signoff.tools.mcp`, as `signoff tools` shows them; the
descriptions are the servers' words, flattened as untrusted text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types

from signoff.bot.untrusted import flat
from signoff.tools.base import Tool
from signoff.tools.mcp import Gate, McpServers
from signoff.tools.mcp.toolset import tool_name


@dataclass(frozen=True)
class GatewayTool:
    """One upstream tool as the gateway offers it, and what it needs to forward a call."""

    tool: Tool
    """The tool as Signoff's toolsets load it: its name, schema, description and gate."""
    gate: Gate
    server: str
    upstream: str
    """The tool's name on its server."""
    listed: types.Tool
    """What `tools/list` answers for it: the upstream's schema and annotations, Signoff's name, the
    description flattened."""

    @property
    def name(self) -> str:
        return self.tool.name


class Catalog:
    """The servers of one `mcpServers` file, started, and their tools by the name clients call."""

    def __init__(self, servers: McpServers) -> None:
        self.servers = servers
        self.tools: dict[str, GatewayTool] = {}
        loaded = servers.tools(servers.config.enabled)
        for server, tools in loaded.items():
            self.tools.update(_offered(servers, server, tools))

    @classmethod
    def from_file(cls, path: str | Path, environ: Mapping[str, str]) -> Catalog:
        """Start every enabled server of the file at `path`; raises `McpConfigError` naming each
        problem (a bad entry, a server that did not start, an override naming no tool)."""
        servers = McpServers.from_file(path, environ)
        try:
            return cls(servers)
        except BaseException:
            servers.close()
            raise

    def listed(self) -> list[types.Tool]:
        return [tool.listed for tool in self.tools.values()]

    def close(self) -> None:
        self.servers.close()


def _offered(servers: McpServers, server: str, tools: list[Tool]) -> dict[str, GatewayTool]:
    connection = servers.connection(server)
    assert connection is not None, f"server {server} was just started"
    by_name = {tool.name: tool for tool in tools}
    offered: dict[str, GatewayTool] = {}
    for entry in connection.listing:
        name = tool_name(server, str(entry.get("name", "")))
        tool, gate = by_name.get(name), servers.gate_of(name)
        if tool is None or gate is None:
            continue  # a tool the toolset skipped (a name or schema Signoff cannot use)
        offered[name] = GatewayTool(tool, gate, server, str(entry["name"]), _listed(entry, tool))
    return offered


def _listed(entry: dict[str, Any], tool: Tool) -> types.Tool:
    shown: dict[str, Any] = {**entry, "name": tool.name, "description": flat(tool.description)}
    if isinstance(entry.get("title"), str):
        shown["title"] = flat(entry["title"])
    annotations = entry.get("annotations")
    if isinstance(annotations, dict) and isinstance(annotations.get("title"), str):
        shown["annotations"] = {**annotations, "title": flat(annotations["title"])}
    return types.Tool.model_validate(shown)
