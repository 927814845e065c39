"""The APIs of an HTTP tools file as `Tool`s: `http__<api>__<tool>`, its argument schema, its gate, and
a call that sends one request (see `calls`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from signoff.tools.base import Tool
from signoff.tools.http.calls import HttpCall, path_problems
from signoff.tools.http.config import ApiConfig, EndpointConfig, HttpConfig, HttpConfigError, tool_name
from signoff.tools.http.gates import HttpGate, resolve_gate
from signoff.tools.mcp.schema import JsonSchemaArgs


class HttpArgs(JsonSchemaArgs):
    """The tool's JSON Schema, plus what a URL path needs of the arguments it takes: checked when the
    call is validated, so a call that cannot be sent never reaches an approver."""

    def __init__(self, tool: EndpointConfig) -> None:
        super().__init__(tool.args)
        self._tool = tool

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        checked = super().validate(args)
        problems = path_problems(self._tool, checked)
        if problems:
            raise ValueError("invalid arguments: " + "; ".join(problems))
        return checked


def api_tools(api: ApiConfig) -> list[Tool]:
    """A `Tool` for each tool of `api`, in the file's order."""
    return [_tool(api, endpoint, resolve_gate(api, endpoint)) for endpoint in api.tools]


def _tool(api: ApiConfig, endpoint: EndpointConfig, gate: HttpGate) -> Tool:
    # The endpoint in the description: what an approver reads before saying yes, and the model too.
    where = f"{endpoint.method} {api.host}{api.base_url.partition(api.host)[2]}{endpoint.path}"
    return Tool(
        tool_name(api.name, endpoint.name), HttpCall(api, endpoint, gate),
        side_effect=gate.side_effect, idempotent=gate.idempotent, args_schema=HttpArgs(endpoint),
        description=f"{endpoint.description.strip()} ({where})", timeout_s=gate.timeout_s,
        redact=endpoint.redact,
    )


def select(config: HttpConfig, names: Sequence[str]) -> list[str]:
    """The API names `http:<api>` entries pick (`*`: all of them), in the file's order; raises
    `HttpConfigError` naming each API the file does not have."""
    problems = [f"http:{name}: {config.path} has no API {name!r} (it has: {', '.join(config.apis)})"
                for name in names if name != "*" and name not in config.apis]
    if problems:
        raise HttpConfigError(problems)
    return [name for name in config.apis if "*" in names or name in names]


def http_gate(tool: Tool) -> HttpGate | None:
    """The gate of an HTTP tool, with where each part came from; None for any other tool."""
    return tool.fn.gate if isinstance(tool.fn, HttpCall) else None
