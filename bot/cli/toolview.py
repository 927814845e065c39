"""`signoff tools`, and the MCP and HTTP lines of `signoff check`: every tool the model will see, with its gate.

`signoff tools --help` imports this module: the tools, MCP and HTTP APIs are imported inside the
functions that load them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import click

from signoff.bot.cli.options import DEMO, MCP_CONFIG, OUTBOX, TOOLS, load_settings, options
from signoff.bot.cli.outcomes import EXIT_OK

if TYPE_CHECKING:
    from signoff.bot.settings import Settings
    from signoff.tools.base import Tool
    from signoff.tools.http import ApiConfig, HttpGate
    from signoff.tools.mcp import Gate, McpServers, ServerReport

CODE = "code"
"""Where a Python tool's gate comes from: the `Tool(...)` that declares it."""
HEADER = ["TOOL", "GATE", "IDEMPOTENCY", "TIMEOUT", "FROM", "DESCRIPTION"]
"""`signoff tools`' first line: what each column of `tool_row` is."""


@click.command("tools")
@options(TOOLS, MCP_CONFIG, OUTBOX, DEMO)
def tools(tools: str | None, mcp_config: str | None, outbox: str | None, demo: bool) -> int:
    """Print every tool the model will see (SIGNOFF_TOOLS, or --tools), one a line under a header:
    its name, whether a call runs by itself (read-only) or waits for an approval, whether it is
    idempotent, its time limit, where each of those came from (code, annotation, method, override,
    server, api, default), and its description. MCP servers are started to list their tools, then
    stopped.
    """
    from signoff.bot.wiring import load_tools, mcp_servers
    from signoff.tools.http import http_gate

    settings = load_settings({"tools": tools, "mcp_config": mcp_config, "outbox": outbox}, demo=demo)
    loaded = load_tools(settings)
    servers = mcp_servers(settings)
    rows = [tool_row(tool, (servers.gate_of(tool.name) if servers else None) or http_gate(tool))
            for tool in loaded.values()]
    for line in aligned([HEADER, *rows] if rows else rows):
        click.echo(line)
    for tool in loaded.values():
        gate = servers.gate_of(tool.name) if servers else None
        for refused in gate.refused if gate else ():
            click.echo(f"note: {tool.name}: override refused: {refused}")
    return EXIT_OK


def tool_row(tool: Tool, gate: Gate | HttpGate | None) -> list[str]:
    """Name, gate, idempotency, time limit, sources, description."""
    from signoff.bot.cli.rendering import one_line

    timeout = f"{tool.timeout_s:g}s" if tool.timeout_s is not None else "no limit"
    idempotent = ("idempotent" if tool.idempotent else "not idempotent") if tool.side_effect else "-"
    if gate is None:
        sources = f"gate: {CODE}"
    else:
        parts = [f"gate: {gate.side_effect_from}"]
        if gate.side_effect:
            parts.append(f"idempotent: {gate.idempotent_from}")
        sources = " · ".join([*parts, f"timeout: {gate.timeout_from}"])
    kind = "approval" if tool.side_effect else "read-only"
    return [tool.name, kind, idempotent, timeout, sources, one_line(tool.description or "(no description)", 100)]


def aligned(rows: list[list[str]]) -> list[str]:
    """The rows as columns, each as wide as its widest cell (the last one left ragged)."""
    if not rows:
        return ["(no tools)"]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
            for row in rows]


def check_mcp(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """For `signoff check`: each configured server, then its tools and how each is gated (nothing
    when no MCP servers are configured)."""
    from signoff.bot.wiring import mcp_servers
    from signoff.runtime.errors import ConfigError

    if not settings.mcp_config:
        return []
    try:
        servers = mcp_servers(settings, environ)
    except ConfigError as exc:
        return [f"FAIL mcp: {exc}"]
    assert servers is not None
    picked = _picked(settings.tools, servers)
    lines: list[str] = []
    for report in _reports(servers):
        lines.extend(server_lines(report, picked))
    return lines


def check_http(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """For `signoff check`: each API of `SIGNOFF_HTTP_TOOLS`, then its tools and how each is gated
    (nothing when it is not set). Header names are shown, never their values."""
    if not settings.http_tools:
        return []
    from signoff.tools.http import HttpConfigError, load_config
    from signoff.tools.registry import HTTP_PREFIX

    try:
        config = load_config(settings.http_tools, environ)
    except HttpConfigError as exc:
        return [f"FAIL http: {problem}" for problem in exc.problems]
    names = [entry.strip().removeprefix(HTTP_PREFIX) for entry in settings.tools.split(",")
             if entry.strip().startswith(HTTP_PREFIX)]
    lines: list[str] = []
    for api in config.apis.values():
        lines.extend(api_lines(api, picked="*" in names or api.name in names))
    return lines


def api_lines(api: ApiConfig, *, picked: bool) -> list[str]:
    from signoff.tools.http import resolve_gate, tool_name

    use = "" if picked else " (not in SIGNOFF_TOOLS)"
    headers = f" · headers: {', '.join(api.headers)}" if api.headers else ""
    lines = [f"ok http {api.name}: {api.base_url} -> {len(api.tools)} tools{use}{headers}"]
    rows = [(tool_name(api.name, tool.name), f"{tool.method} {tool.path}", resolve_gate(api, tool).summary())
            for tool in api.tools]
    name_width, call_width = (max(len(row[i]) for row in rows) for i in (0, 1))
    lines += [f"    {name:<{name_width}}  {call:<{call_width}}  {gate}" for name, call, gate in rows]
    return lines


def server_lines(report: ServerReport, picked: set[str]) -> list[str]:
    from signoff.bot.cli.rendering import one_line

    use = "" if report.name in picked else " (not in SIGNOFF_TOOLS)"
    if report.disabled:
        return [f"skip mcp {report.name}: disabled"]
    if report.error:
        return [f"FAIL mcp {report.name}: {report.where}: could not start: {one_line(report.error, 500)}"]
    lines = [f"ok mcp {report.name}: {report.where} -> {len(report.gates)} tools{use}"]
    width = max((len(name) for name in report.gates), default=0)
    lines += [f"    {name:<{width}}  {gate.summary()}" for name, gate in report.gates.items()]
    lines += [f"    skipped {why}" for why in report.skipped]
    return lines


def _reports(servers: McpServers) -> list[ServerReport]:
    from signoff.tools.mcp import McpConfigError, ServerReport

    try:
        return servers.reports()
    except McpConfigError as exc:  # the SDK is not installed: say how to install it, per server
        return [ServerReport(name, server.where, error=str(exc)) for name, server in servers.config.servers.items()]


def _picked(spec: str, servers: McpServers) -> set[str]:
    from signoff.tools.registry import MCP_PREFIX

    names = [entry.strip().removeprefix(MCP_PREFIX) for entry in spec.split(",")
             if entry.strip().startswith(MCP_PREFIX)]
    return set(servers.config.enabled if "*" in names else names)
