"""Toolsets named in `SIGNOFF_TOOLS`: `demo`, `mcp:<server>` (or `mcp:*`), `http:<api>` (or `http:*`), or
`package.module:attribute`, comma-separated.

Explicit on purpose: each entry names one module, imported with `importlib`, and one attribute
of it, a list of `Tool` or a callable returning one; or one server of the MCP configuration
(`SIGNOFF_MCP_CONFIG`), `mcp:*` for all of them; or one API of the HTTP tools file
(`SIGNOFF_HTTP_TOOLS`), `http:*` for all of them. Nothing is scanned or discovered.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from signoff.tools.base import Tool
from signoff.tools.demo import demo_tools
from signoff.tools.mcp.config import McpConfigError
from signoff.tools.mcp.servers import McpServers

DEMO = "demo"
MCP_PREFIX = "mcp:"
HTTP_PREFIX = "http:"
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


class ToolsetError(ValueError):
    """`SIGNOFF_TOOLS` names something that is not a usable toolset; every problem found, at once.

    Ours, not the engine's `ConfigError`: the tool contract and its loader import nothing from the
    engine. The edge that reads the setting reports it as a `ConfigError`.
    """

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class _BadEntry(Exception):
    """One problem with one entry; collected and reported together as a `ToolsetError`."""


class _BadEntries(Exception):
    """Several problems with one entry (an HTTP tools file, say), reported with the others."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def load_toolsets(spec: str, *, outbox: str | Path, mcp: McpServers | None = None,
                  http_config: str | Path | None = None, environ: Mapping[str, str] | None = None) -> dict[str, Tool]:
    """Every tool of every toolset in `spec`, by name.

    `mcp` holds the configured MCP servers; the ones `mcp:` entries pick are started here (the
    caller stops them with `mcp.close()`). `http_config` is the HTTP tools file `http:` entries
    pick APIs from, its `${VAR}` taken from `environ`; it is read only when an entry picks one.

    Raises `ToolsetError` listing each bad entry (unknown module or attribute, something other
    than a list of `Tool`, an MCP server that is not configured or does not start, an HTTP tools
    file that cannot be used or lacks the API) and each tool name defined twice.
    """
    entries = [entry.strip() for entry in spec.split(",")]
    if not any(entries):
        raise ToolsetError(f"no toolsets named: give {DEMO!r} or 'package.module:attribute', comma-separated")
    problems: list[str] = []
    tools: dict[str, Tool] = {}
    defined_by: dict[str, str] = {}
    picked = _Picked.by(entries)
    for position, entry in enumerate(entries, start=1):
        if (problem := _listing_problem(spec, entries, position)) is not None:
            problems.append(problem)
            continue
        try:
            loaded = picked.load(entry, Path(outbox), mcp, http_config, environ or {})
        except _BadEntry as exc:
            problems.append(str(exc))
            continue
        except (McpConfigError, _BadEntries) as exc:
            problems.extend(exc.problems)
            continue
        for source, source_tools in loaded:
            _add(source, source_tools, tools, defined_by, problems)
    if problems:
        raise ToolsetError(problems)
    return tools


def _listing_problem(spec: str, entries: list[str], position: int) -> str | None:
    """What is wrong with how entry `position` (from 1) is listed: empty, or listed before."""
    entry = entries[position - 1]
    if not entry:
        return f"toolset entry {position} of {spec!r} is empty (a stray comma?)"
    if entry in entries[: position - 1]:
        return f"toolset {entry!r} is listed twice"
    return None


@dataclass
class _Picked:
    """The MCP servers and HTTP APIs the entries pick that are not loaded yet: each kind loads all
    at once, at the place of its first entry."""

    servers: list[str]
    apis: list[str]

    @classmethod
    def by(cls, entries: list[str]) -> _Picked:
        return cls(list(dict.fromkeys(e.removeprefix(MCP_PREFIX) for e in entries if e.startswith(MCP_PREFIX))),
                   list(dict.fromkeys(e.removeprefix(HTTP_PREFIX) for e in entries if e.startswith(HTTP_PREFIX))))

    def load(self, entry: str, outbox: Path, mcp: McpServers | None, http_config: str | Path | None,
             environ: Mapping[str, str]) -> list[tuple[str, list[Tool]]]:
        """The tools `entry` brings, by the source they come from (none for a later `mcp:` or `http:`)."""
        if entry.startswith(MCP_PREFIX):
            # Every server the entries pick, started at once, at the place of the first of them.
            servers, self.servers = self.servers, []
            return _load_mcp(servers, mcp) if servers else []
        if entry.startswith(HTTP_PREFIX):
            # Every API the entries pick, at the place of the first of them (`http:*` and a name overlap).
            apis, self.apis = self.apis, []
            return _load_http(apis, http_config, environ) if apis else []
        return [(entry, _load(entry, outbox))]


def _add(entry: str, loaded: list[Tool], tools: dict[str, Tool], defined_by: dict[str, str],
         problems: list[str]) -> None:
    """Add `entry`'s tools to `tools`; a name already defined is added to `problems` instead."""
    for tool in loaded:
        if tool.name in defined_by:
            where = defined_by[tool.name]
            problems.append(
                f"toolset {entry!r} defines tool {tool.name!r} twice" if where == entry
                else f"tool {tool.name!r} is defined by both {where!r} and {entry!r}"
            )
            continue
        tools[tool.name] = tool
        defined_by[tool.name] = entry


def _load_mcp(names: list[str], mcp: McpServers | None) -> list[tuple[str, list[Tool]]]:
    """The tools of the MCP servers `names` picks (`*`: all), each attributed to its `mcp:<server>` entry."""
    if mcp is None:
        raise McpConfigError(f"toolset {MCP_PREFIX}{names[0]}: no MCP servers are configured (set "
                             "SIGNOFF_MCP_CONFIG to a file with an \"mcpServers\" object)")
    by_server = mcp.tools(mcp.select(names))
    return [(f"{MCP_PREFIX}{server}", tools) for server, tools in by_server.items()]


def _load_http(names: list[str], path: str | Path | None, environ: Mapping[str, str]) -> list[tuple[str, list[Tool]]]:
    """The tools of the HTTP APIs `names` picks (`*`: all), each attributed to its `http:<api>` entry."""
    # Imported here: the client and the schema validator cost a start-up that uses no HTTP tools.
    from signoff.tools.http import HttpConfigError, api_tools, load_config, select

    if path is None:
        raise _BadEntry(f"toolset {HTTP_PREFIX}{names[0]}: no HTTP APIs are configured (set "
                        'SIGNOFF_HTTP_TOOLS to a YAML file with an "apis" mapping)')
    try:
        config = load_config(path, environ)
        return [(f"{HTTP_PREFIX}{name}", api_tools(config.apis[name])) for name in select(config, names)]
    except HttpConfigError as exc:
        raise _BadEntries(exc.problems) from None


def describe_tools(tools: Mapping[str, Tool] | Iterable[Tool]) -> str:
    """One line per tool: name, whether it has side effects, timeout, description."""
    listed = list(tools.values() if isinstance(tools, Mapping) else tools)
    if not listed:
        return "(no tools)"
    kinds = [_kind(tool) for tool in listed]
    name_width = max(len(tool.name) for tool in listed)
    kind_width = max(len(kind) for kind in kinds)
    lines = []
    for tool, kind in zip(listed, kinds, strict=True):
        summary = " ".join(tool.description.split()) or "(no description)"
        lines.append(f"{tool.name:<{name_width}}  {kind:<{kind_width}}  {summary}")
    return "\n".join(lines)


def _kind(tool: Tool) -> str:
    kind = "read-only"
    if tool.side_effect:
        kind = "side effect" if tool.idempotent else "side effect, not idempotent"
    timeout = f"{tool.timeout_s:g}s" if tool.timeout_s is not None else "no timeout"
    return f"{kind}, {timeout}"


def _load(entry: str, outbox: Path) -> list[Tool]:
    if entry == DEMO:
        return demo_tools(outbox)
    module_name, colon, attribute = entry.partition(":")
    if not colon:
        raise _BadEntry(f"toolset {entry!r}: expected {DEMO!r} or 'package.module:attribute'")
    if not _DOTTED.match(module_name) or not _DOTTED.match(attribute):
        raise _BadEntry(f"toolset {entry!r}: not a 'package.module:attribute' path")
    value = _resolve(entry, _import(entry, module_name), attribute)
    if callable(value):
        try:
            value = value()
        # A factory is user code run at start-up; whatever it raises is a configuration problem.
        except Exception as exc:
            raise _BadEntry(f"toolset {entry!r}: calling {attribute}() raised {type(exc).__name__}: {exc}") from exc
    return _tools_in(entry, value)


def _import(entry: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Tell "the module named here does not exist" from "it exists but imports something missing".
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise _BadEntry(
                f"toolset {entry!r}: no module named {exc.name!r} (is it installed, or on PYTHONPATH?)"
            ) from exc
        raise _BadEntry(f"toolset {entry!r}: importing {module_name!r} failed: {exc}") from exc
    # Importing runs user code; whatever it raises is a configuration problem to report, not a crash.
    except Exception as exc:
        raise _BadEntry(f"toolset {entry!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}") from exc


def _resolve(entry: str, module: Any, attribute: str) -> Any:
    value = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise _BadEntry(f"toolset {entry!r}: {module.__name__!r} has no attribute {attribute!r}") from None
    return value


def _tools_in(entry: str, value: Any) -> list[Tool]:
    if not isinstance(value, list | tuple):
        raise _BadEntry(f"toolset {entry!r}: expected a list of Tool, got {type(value).__name__}")
    if not value:
        raise _BadEntry(f"toolset {entry!r}: the list of tools is empty")
    wrong = [f"item {i} is {type(item).__name__}" for i, item in enumerate(value) if not isinstance(item, Tool)]
    if wrong:
        raise _BadEntry(f"toolset {entry!r}: not a Tool: {', '.join(wrong)}")
    return list(value)
