"""The `Tool` contract: a named function with an argument model and a side-effect flag.

Pure: no I/O of its own. `fn(args, key)` receives validated arguments (a dict) and the
idempotency key `run_id:step`, and returns a JSON-serialisable result.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class ToolFailed(Exception):
    """Raised by a tool for an expected failure; the message goes to the model and the channel."""


@dataclass(frozen=True)
class Tool:
    """A callable the agent may use.

    Args:
        name: unique name the model calls it by (letters, digits, `_` and `-`).
        fn: `fn(args, key) -> result`; `key` is the idempotency key `run_id:step`.
        side_effect: if true, every call waits for a human approval before it runs.
        args_model: pydantic model validating the arguments; its JSON schema is what a model sees.
        description: one or two sentences for the model and for approvers.
        timeout_s: seconds before the call is abandoned and reported as a timeout.
        idempotent: the tool dedupes on `key`, so re-running it with the same key is safe.
    """

    name: str
    fn: Callable[[dict[str, Any], str], Any]
    side_effect: bool = False
    args_model: type[BaseModel] | None = None
    description: str = ""
    timeout_s: float | None = 30.0
    idempotent: bool = False
    redact: tuple[str, ...] = field(default=())
    """Extra argument names to hide in Slack, logs and the audit log, besides the global list."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}: use letters, digits, '_' or '-', at most 64")
        if not callable(self.fn):
            raise TypeError(f"tool {self.name!r}: fn is not callable")
        if self.args_model is not None and not (
            isinstance(self.args_model, type) and issubclass(self.args_model, BaseModel)
        ):
            raise TypeError(f"tool {self.name!r}: args_model must be a pydantic BaseModel subclass")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be positive")

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments, as a model sees it."""
        if self.args_model is None:
            return {"type": "object", "properties": {}, "additionalProperties": True}
        return self.args_model.model_json_schema()

    def validate(self, args: Any) -> dict[str, Any]:
        """Return the validated arguments as plain JSON data, or raise `ValueError` listing field errors."""
        if not isinstance(args, dict):
            raise ValueError(f"arguments must be a JSON object, got {type(args).__name__}")
        if self.args_model is None:
            return args
        try:
            return self.args_model.model_validate(args).model_dump(mode="json")
        except ValidationError as exc:
            raise ValueError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    """`field: message` for every error, joined, without echoing the input values."""
    parts = []
    for err in exc.errors(include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{where}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)
