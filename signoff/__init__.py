"""Signoff: agents act, humans sign off.

What user code imports: `from signoff import Tool, ToolFailed, Agent, Budget`. The engine, the tool
contract and the Slack edge live in `signoff.runtime`, `signoff.tools` and `signoff.bot`; nothing is
installed under a bare top-level name, so a project's own `tools/`, `bot/` or `runtime/` package
cannot shadow ours, nor ours theirs.
"""

from signoff.runtime import (
    ACTIVE,
    SCHEMA_VERSION,
    STATUSES,
    TERMINAL,
    WAITING_ON_HUMAN,
    Agent,
    Budget,
    Checkpoint,
    ConfigError,
    Conflict,
    DispatchRefused,
    Executor,
    IncompatibleState,
    InvalidTransition,
    ModelAuthError,
    ModelUnavailable,
    NotFound,
    OutcomeUnknown,
    Policy,
    RunState,
    SignoffError,
    Status,
    ToolTimeout,
    call_digest,
    redact,
    run_tool,
)
from signoff.tools import Tool, ToolFailed

__all__ = [
    "ACTIVE", "Agent", "Budget", "Checkpoint", "Conflict", "ConfigError", "DispatchRefused", "Executor",
    "IncompatibleState", "InvalidTransition", "ModelAuthError", "ModelUnavailable", "NotFound",
    "OutcomeUnknown", "Policy", "RunState", "SCHEMA_VERSION", "STATUSES", "SignoffError", "Status", "TERMINAL", "Tool",
    "ToolFailed", "ToolTimeout", "WAITING_ON_HUMAN", "call_digest", "redact", "run_tool",
]
