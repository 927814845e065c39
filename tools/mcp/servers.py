"""The MCP servers of one configuration: started when their tools load, stopped together.

`McpServers(config).tools(["git"])` starts `git` (once; a second call reuses it), waits for its
tool listing and returns its tools. `close()` stops every server it started; any still running at
interpreter exit are stopped then, so no server outlives the process that started it.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from signoff.extras import install_extra
from signoff.tools.base import Tool
from signoff.tools.mcp.config import McpConfig, McpConfigError, load_config
from signoff.tools.mcp.gates import Gate, GateRule

if TYPE_CHECKING:
    from signoff.tools.mcp.connection import ServerConnection
    from signoff.tools.mcp.toolset import ServerTools

INSTALL_HINT = f"MCP servers need the mcp extra: {install_extra('mcp')}"


@dataclass(frozen=True)
class ServerReport:
    """One configured server for `signoff check`: how it is reached, and its tools with their gates."""

    name: str
    where: str
    error: str | None = None
    gates: dict[str, Gate] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()
    disabled: bool = False


class McpServers:
    """The servers `config` names, each started on first use; thread-safe."""

    def __init__(self, config: McpConfig, rules: Sequence[GateRule] = ()) -> None:
        self.config = config
        self.rules = tuple(rules)
        self._connections: dict[str, ServerConnection] = {}
        self._loaded: dict[str, ServerTools] = {}
        self._lock = threading.Lock()
        _LIVE.add(self)

    @classmethod
    def from_file(cls, path: str | Path, environ: Mapping[str, str]) -> McpServers:
        """Servers from the file at `path`, `${VAR}` taken from `environ`; raises `McpConfigError`."""
        return cls(load_config(path, environ))

    def select(self, names: Sequence[str]) -> list[str]:
        """The server names `mcp:<name>` entries pick (`*`: every enabled one), in the file's order."""
        problems = [f"mcp:{name}: {self.config.path} has no server {name!r} (it has: {', '.join(self.config.servers)})"
                    for name in names if name != "*" and name not in self.config.servers]
        problems += [f"mcp:{name}: the server is disabled in {self.config.path}" for name in names
                     if name in self.config.servers and self.config.servers[name].disabled]
        if problems:
            raise McpConfigError(problems)
        wanted = set(self.config.enabled) if "*" in names else set(names)
        return [name for name in self.config.servers if name in wanted]

    def tools(self, names: Sequence[str]) -> dict[str, list[Tool]]:
        """The tools of each server named, starting those not running (all at once); raises
        `McpConfigError` naming each server that did not start (and why) and each override naming no tool."""
        loaded = self._load(names)
        problems = [f"server {name} could not start: {error}" for name, error in loaded.items() if error]
        from signoff.tools.mcp.toolset import unknown_overrides

        for name in names:
            if name in self._connections and not loaded.get(name):
                problems += unknown_overrides(self.config.servers[name], self._connections[name].listing)
        if problems:
            raise McpConfigError(problems)
        return {name: list(self._loaded[name].tools) for name in names}

    def gate_of(self, tool_name: str) -> Gate | None:
        """The gate of a loaded MCP tool, with where each part came from; None for any other tool."""
        for loaded in self._loaded.values():
            if tool_name in loaded.gates:
                return loaded.gates[tool_name]
        return None

    def connection(self, name: str) -> ServerConnection | None:
        """The running connection of server `name` (None when it is not running), for a caller that
        forwards calls as the server answers them (the gateway) rather than as `Tool`s."""
        return self._connections.get(name)

    def reports(self) -> list[ServerReport]:
        """Every configured server, started if it is enabled, with its tools or why it has none."""
        enabled = self.config.enabled
        errors = self._load(enabled)
        reports = []
        for name, server in self.config.servers.items():
            loaded = self._loaded.get(name)
            reports.append(ServerReport(
                name, server.where, error=errors.get(name), disabled=server.disabled,
                gates=dict(loaded.gates) if loaded else {}, skipped=tuple(loaded.skipped) if loaded else ()))
        return reports

    def close(self) -> None:
        """Stop every server started here, each in parallel; safe to call twice."""
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
            self._loaded.clear()
        stoppers = [threading.Thread(target=c.close, name=f"mcp-stop-{c.name}") for c in connections]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()

    def _load(self, names: Sequence[str]) -> dict[str, str | None]:
        """Start the servers named that are not running, all at once; an error message per server that failed."""
        try:
            from signoff.tools.mcp.connection import ServerConnection, ServerStartFailed
            from signoff.tools.mcp.toolset import server_tools
        except ImportError as exc:
            raise McpConfigError(f"{INSTALL_HINT} ({exc})") from None
        with self._lock:
            fresh = [name for name in names if name not in self._connections]
            for name in fresh:
                self._connections[name] = ServerConnection(self.config.servers[name])
                self._connections[name].start()
            errors: dict[str, str | None] = {}
            for name in fresh:
                connection = self._connections[name]
                try:
                    listing = connection.wait_started()
                except ServerStartFailed as exc:
                    errors[name] = str(exc)
                    connection.close()
                    del self._connections[name]
                    continue
                self._loaded[name] = server_tools(connection, listing, self.rules)
        return errors


_LIVE: weakref.WeakSet[McpServers] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """At exit, stop whatever servers a caller did not close (a stdio server would notice its stdin
    closing anyway; this makes it prompt and keeps the SDK's shutdown warnings away)."""
    for servers in list(_LIVE):
        servers.close()
