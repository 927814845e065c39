"""HTTP APIs as toolsets: `SIGNOFF_HTTP_TOOLS=apis.yaml` describes them, `SIGNOFF_TOOLS=http:tickets` picks them.

`config` reads the file (pydantic, `${VAR}` in headers from the environment), `gates` says which
tools wait for an approval, `calls` sends one request with httpx, `toolset` makes the `Tool`s.
"""

from signoff.tools.http.config import (
    ApiConfig,
    EndpointConfig,
    HttpConfig,
    HttpConfigError,
    load_config,
    tool_name,
)
from signoff.tools.http.gates import HttpGate, resolve_gate
from signoff.tools.http.toolset import api_tools, http_gate, select

__all__ = [
    "ApiConfig", "EndpointConfig", "HttpConfig", "HttpConfigError", "HttpGate", "api_tools", "http_gate",
    "load_config", "resolve_gate", "select", "tool_name",
]
