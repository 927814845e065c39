"""The tools the gateway offers: every tool of every enabled server of an `mcpServers` file, named,
gated and described exactly as Signoff's MCP toolsets name, gate and describe them.

Nothing here decides a rule of its own: the names (`mcp__<server>__<tool>`), the schemas, the gates
(annotations, overrides, defaults) come from `signoff.tools.mcp`, as `signoff tools` shows them; the
descriptions are the servers' words, flattened as untrusted text.

The catalog follows its servers: one that says its tool list changed is listed again, its tools
are offered as they are now, and the catalog's listeners are told (the gateway tells its clients).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types

from signoff.bot.untrusted import flat
from signoff.tools.base import Tool
from signoff.tools.mcp import Gate, McpServers
from signoff.tools.mcp.toolset import ServerTools, server_tools, tool_name


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
        self.listeners: list[Callable[[], None]] = []
        """Each called (on a server's thread) after a server's tools changed."""
        self._lock = threading.Lock()
        loaded = servers.tools(servers.config.enabled)
        for server, tools in loaded.items():
            connection = servers.connection(server)
            assert connection is not None, f"server {server} was just started"
            made = ServerTools(tools, {tool.name: gate for tool in tools
                                       if (gate := servers.gate_of(tool.name)) is not None})
            self.tools.update(_offered(server, connection.listing, made))
            connection.follow_tools(functools.partial(self._relisted, server))

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

    def tool_now(self, name: str) -> Tool | None:
        """The tool called `name` as its server lists it now (None: it lists it no more)."""
        offered = self.tools.get(name)
        return offered.tool if offered is not None else None

    def listed(self) -> list[types.Tool]:
        return [tool.listed for tool in self.tools.values()]

    def _relisted(self, server: str, listing: list[dict[str, Any]]) -> None:
        """`server` lists `listing` now: its tools are offered as listed (the gates as Signoff's
        toolsets would make them), and the listeners told."""
        connection = self.servers.connection(server)
        if connection is None:
            return
        offered = _offered(server, listing, server_tools(connection, listing, self.servers.rules))
        with self._lock:
            kept = {name: tool for name, tool in self.tools.items() if tool.server != server}
            self.tools = {**kept, **offered}
        for listener in list(self.listeners):
            listener()

    def close(self) -> None:
        self.servers.close()


def _offered(server: str, listing: list[dict[str, Any]], made: ServerTools) -> dict[str, GatewayTool]:
    by_name = {tool.name: tool for tool in made.tools}
    offered: dict[str, GatewayTool] = {}
    for entry in listing:
        name = tool_name(server, str(entry.get("name", "")))
        tool, gate = by_name.get(name), made.gates.get(name)
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
