"""`SIGNOFF_MCP_CONFIG`: the servers, in the format Claude Desktop, Cursor and VS Code already use.

    {"mcpServers": {
        "git":     {"command": "mcp-server-git", "args": ["--repository", "."], "env": {"K": "${K}"}},
        "tickets": {"url": "https://tickets.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"},
                    "timeout": 20, "tools": {"close_ticket": {"idempotent": false, "timeout": 60}}}}}

`${VAR}` (or `${VAR:-default}`) in a command, an argument, a working directory, a URL, an `env`
or a header value is taken from the environment, so secrets stay out of the file; a variable
that is not set is an error naming the server and the variable. Signoff's own keys beside the
ecosystem's: `timeout` (seconds per call), `startup_timeout`, `trusted`, `disabled` and
`tools` (per-tool overrides of the gates, see `gates`). Any other key is refused, so a typo in
an override never leaves a tool less guarded than the operator meant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
"""And no `__` (see `ServerConfig._one_name_end`)."""
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# Where `${VAR}` is expanded: the fields that say how to reach a server, never the overrides.
_EXPANDED = ("command", "args", "cwd", "env", "url", "headers")

DEFAULT_TIMEOUT_S = 30.0
"""Seconds a call may take when neither the server's entry nor the tool's override says."""


class McpConfigError(ValueError):
    """The MCP configuration cannot be used; every problem found, at once."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class ToolOverride(BaseModel):
    """The operator's word on one tool's gate, which wins over the server's annotations."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    side_effect: bool | None = None
    idempotent: bool | None = None
    timeout: PositiveFloat | None = None
    redact: tuple[str, ...] = ()


class ServerConfig(BaseModel):
    """One entry of `mcpServers`: a command to start (stdio) or a URL to reach (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=SERVER_NAME.pattern)
    type: Literal["stdio", "http", "streamable-http"] | None = None
    command: str | None = Field(None, min_length=1)
    args: tuple[str, ...] = ()
    cwd: str | None = None
    # Values are often credentials: kept out of repr and of every message.
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    url: str | None = Field(None, pattern=r"^https?://[^/\s]+")
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout: PositiveFloat | None = None
    startup_timeout: PositiveFloat = 30.0
    trusted: bool = False
    disabled: bool = False
    tools: dict[str, ToolOverride] = Field(default_factory=dict)
    _shown: str = PrivateAttr("")

    @field_validator("name")
    @classmethod
    def _one_name_end(cls, name: str) -> str:
        # `mcp__<server>__<tool>` must say where the server's name ends: `mcp__git__x__commit`
        # cannot be both `git`'s tool `x__commit` and `git__x`'s tool `commit`.
        if "__" in name:
            raise ValueError("a server's name may not contain '__' (it separates server and tool in tool names)")
        return name

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError('give either "command" (a local server) or "url" (a remote one)')
        if self.command is not None and (self.headers or self.type not in (None, "stdio")):
            raise ValueError('"headers" and an http "type" go with "url", not "command"')
        if self.url is not None and (self.args or self.env or self.cwd or self.type == "stdio"):
            raise ValueError('"args", "env", "cwd" and type "stdio" go with "command", not "url"')
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    @property
    def where(self) -> str:
        """How the server is reached, for people: the command line or the URL as the file writes
        them, `${VAR}` and all, so a secret taken from the environment is never shown."""
        if self._shown:
            return self._shown
        return " ".join([self.command, *self.args]) if self.command is not None else str(self.url)


class McpConfig(BaseModel):
    """Every configured server, by name, in the file's order."""

    model_config = ConfigDict(frozen=True)

    path: str
    servers: dict[str, ServerConfig]

    @property
    def enabled(self) -> list[str]:
        return [name for name, server in self.servers.items() if not server.disabled]


def load_config(path: str | Path, environ: Mapping[str, str]) -> McpConfig:
    """Read and check the file at `path`, expanding `${VAR}` from `environ`.

    Raises `McpConfigError` listing every problem: unreadable or invalid JSON, a bad entry, a
    variable that is not set.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(f"SIGNOFF_MCP_CONFIG: cannot read {str(path)!r}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    return parse_config(data, environ, path=str(path))


def parse_config(data: Any, environ: Mapping[str, str], *, path: str = "mcp.json") -> McpConfig:
    """`load_config` for JSON already read."""
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f'{path}: expected {{"mcpServers": {{"<name>": {{...}}}}}}')
    problems: list[str] = []
    parsed: dict[str, ServerConfig] = {}
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            problems.append(f"server {name}: expected an object with a command or a url")
            continue
        expanded, missing = _expand(entry, environ)
        problems.extend(f"server {name}: {where} uses ${{{variable}}}, which is not set in the environment"
                        for where, variable in missing)
        try:
            parsed[name] = ServerConfig.model_validate({**expanded, "name": name})
        except ValidationError as exc:
            problems.extend(f"server {name}: {problem}" for problem in _problems(exc))
            continue
        parsed[name]._shown = _as_written(entry)
    if problems:
        raise McpConfigError(problems)
    return McpConfig(path=path, servers=parsed)


def _expand(entry: dict[str, Any], environ: Mapping[str, str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`entry` with `${VAR}` replaced in the fields that reach a server, and each (field, VAR) not set."""
    missing: list[tuple[str, str]] = []

    def expand(value: Any, where: str) -> Any:
        if isinstance(value, str):
            def replace(match: re.Match[str]) -> str:
                variable, default = match.group(1), match.group(2)
                if variable in environ and environ[variable] != "":
                    return environ[variable]
                if default is not None:
                    return default
                missing.append((where, variable))
                return ""
            return _VARIABLE.sub(replace, value)
        if isinstance(value, list):
            return [expand(item, f"{where}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, dict):
            return {key: expand(item, f"{where}.{key}") for key, item in value.items()}
        return value

    expanded = {key: expand(value, key) if key in _EXPANDED else value for key, value in entry.items()}
    return expanded, missing


def _as_written(entry: dict[str, Any]) -> str:
    if "command" in entry:
        return " ".join(str(part) for part in [entry["command"], *entry.get("args", [])])
    return str(entry.get("url", ""))


def _problems(exc: ValidationError) -> list[str]:
    """`field: message` for each error, never quoting the input (an env or header value is a secret)."""
    problems = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "not a key Signoff knows (a typo?)"
        problems.append(f"{where}: {message}" if where else message)
    return problems
