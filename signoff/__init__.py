"""Signoff: agents act, humans sign off.

What user code imports: `from signoff import Tool, ToolFailed, Agent, Budget`. The engine, the tool
contract and the Slack edge live in `signoff.runtime`, `signoff.tools` and `signoff.bot`; nothing is
installed under a bare top-level name, so a project's own `tools/`, `bot/` or `runtime/` package
cannot shadow ours, nor ours theirs.
"""

# The public names are the runtime's, listed once there.
from signoff.runtime import *  # noqa: F403
from signoff.runtime import __all__ as __all__
