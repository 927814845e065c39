"""Signoff's agent runtime: a typed, JSON-serialised state machine with budgets, checkpoints and an approval gate."""

from signoff.runtime.agent import Agent, Checkpoint, Executor, Policy
from signoff.runtime.budget import Budget
from signoff.runtime.errors import (
    ConfigError,
    Conflict,
    DispatchRefused,
    IncompatibleState,
    InvalidTransition,
    ModelAuthError,
    ModelUnavailable,
    NotFound,
    OutcomeUnknown,
    SignoffError,
)
from signoff.runtime.schema import (
    ACTIVE,
    SCHEMA_VERSION,
    STATUSES,
    TERMINAL,
    WAITING_ON_HUMAN,
    RunState,
    Status,
)
from signoff.runtime.state import call_digest, redact
from signoff.runtime.tool_calls import ToolTimeout, run_tool
from signoff.tools.base import Tool, ToolFailed

__all__ = [
    "ACTIVE", "Agent", "Budget", "Checkpoint", "Conflict", "ConfigError", "DispatchRefused", "Executor",
    "IncompatibleState", "InvalidTransition", "ModelAuthError", "ModelUnavailable", "NotFound",
    "OutcomeUnknown", "Policy", "RunState", "SCHEMA_VERSION", "STATUSES", "SignoffError", "Status", "TERMINAL", "Tool",
    "ToolFailed", "ToolTimeout", "WAITING_ON_HUMAN", "call_digest", "redact", "run_tool",
]
