"""A run's history: what the model was told and said, one entry at a time, as typed values.

History entries are a tagged union told apart by `role` and the key that defines each kind (a
tool call has `tool`, a final answer `final`, a tool's result `result`, ...), which is how
version 1 wrote them: the history's JSON is the same in both versions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Discriminator, JsonValue, Tag

from signoff.runtime.values import Count, Value

ErrorKind = Literal["exception", "unknown_tool", "invalid_args", "denied", "denied_by_rule", "duplicate", "timeout",
                    "refused", "unanswered"]
ERROR_KINDS: tuple[str, ...] = get_args(ErrorKind)


class Versions(Value):
    """What produced a model turn: the model spec, the system prompt's hash and the tool catalogue's
    hash (a key of the state's `contracts`)."""

    model: str | None
    prompt: str | None
    tools: str | None


class ReportedUsage(Value):
    """The usage a reply reported, as reported (untrusted: a replay charges the same)."""

    input_tokens: JsonValue = None
    output_tokens: JsonValue = None
    cost_usd: JsonValue = None


class _Turn(Value):
    role: Literal["assistant"]
    step: Count
    versions: Versions | None = None
    usage: ReportedUsage | None = None


class Goal(Value):
    role: Literal["user"]
    content: str


class ToolCall(_Turn):
    tool: str
    args: JsonValue
    """As proposed: not necessarily an object (that is for the tool to refuse)."""
    call_id: str
    text: str | None = None
    """What the model said beside its call."""
    note: str | None = None
    """What an adapter did with the reply, e.g. dropped calls."""


class FinalAnswer(_Turn):
    final: str


class MalformedReply(_Turn):
    malformed: str


class _Observation(Value):
    role: Literal["tool"]
    step: Count
    tool: str
    call_id: str
    rule: str | None = None
    """The approval policy's rule that allowed (a result) or denied (an error) the call without a person."""
    edited: str | None = None
    """How a person changed the call before it ran, as the model is told it."""
    grant: str | None = None
    """The grant ("Approve + allow similar") that let the call run unasked."""


class ToolResult(_Observation):
    result: JsonValue


class ToolError(_Observation):
    error: str
    error_kind: ErrorKind | None = None


class RuntimeFeedback(Value):
    role: Literal["runtime"]
    step: Count
    error: str


def entry_kind(entry: Any) -> str | None:
    """The tag of a history entry (a dict or a model): its role and the key that defines its kind."""
    if isinstance(entry, Value):
        return _KINDS.get(type(entry))
    if not isinstance(entry, dict):
        return None
    match entry.get("role"):
        case "user":
            return "goal"
        case "assistant":
            return next((kind for key, kind in _TURN_KEYS if key in entry), None)
        case "tool":
            return "tool_result" if "result" in entry else "tool_error" if "error" in entry else None
        case "runtime":
            return "runtime_feedback"
    return None


_TURN_KEYS = (("tool", "tool_call"), ("final", "final_answer"), ("malformed", "malformed_reply"))
_KINDS: dict[type[Value], str] = {
    Goal: "goal", ToolCall: "tool_call", FinalAnswer: "final_answer", MalformedReply: "malformed_reply",
    ToolResult: "tool_result", ToolError: "tool_error", RuntimeFeedback: "runtime_feedback",
}

HistoryEntry = Annotated[
    Annotated[Goal, Tag("goal")] | Annotated[ToolCall, Tag("tool_call")]
    | Annotated[FinalAnswer, Tag("final_answer")] | Annotated[MalformedReply, Tag("malformed_reply")]
    | Annotated[ToolResult, Tag("tool_result")] | Annotated[ToolError, Tag("tool_error")]
    | Annotated[RuntimeFeedback, Tag("runtime_feedback")],
    Discriminator(entry_kind, custom_error_type="unknown_history_entry",
                  custom_error_message="not a history entry: its role is not user, assistant, tool or runtime, "
                                       "or it lacks the key that says what it is (tool, final, malformed, "
                                       "result or error)"),
]
