"""MCP servers as toolsets: `SIGNOFF_MCP_CONFIG=mcp.json` names them, `SIGNOFF_TOOLS=mcp:git` picks them.

The configuration and the gates (`config`, `gates`) need nothing beyond pydantic; talking to the
servers (`connection`, `transport`) needs the `mcp` extra (`signoff.extras.install_extra`), imported
only when a server is started.
"""

from signoff.tools.mcp.config import McpConfig, McpConfigError, ServerConfig, load_config
from signoff.tools.mcp.gates import Gate, GateRule
from signoff.tools.mcp.servers import McpServers, ServerReport

__all__ = [
    "Gate", "GateRule", "McpConfig", "McpConfigError", "McpServers", "ServerConfig", "ServerReport", "load_config",
]
