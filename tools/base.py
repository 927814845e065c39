"""The `Tool` contract: a named function with an argument model and a side-effect flag.

Pure: no I/O of its own. `fn(args, key)` receives validated arguments (a dict) and the
idempotency key `run_id:step`, and returns a JSON-serialisable result. Arguments are described
by a pydantic model (`args_model`) or, for tools defined elsewhere (an MCP server's), by a JSON
Schema with its validator (`args_schema`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class ToolFailed(Exception):
    """Raised by a tool for an expected failure; the message goes to the model and the channel."""


class ToolOutcomeUnknown(Exception):
    """Raised by a tool that cannot tell whether its effect happened (the server it called went
    away mid-call): like a timeout, the call must not be retried blindly."""


@runtime_checkable
class ArgsSchema(Protocol):
    """Arguments described by a JSON Schema instead of a pydantic model (e.g. an MCP tool's
    `inputSchema`): the schema a model sees, and the validator that checks a call against it."""

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, as a model sees it."""
        ...

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments as they will run, or `ValueError` naming each problem (never echoing values)."""
        ...


@dataclass(frozen=True)
class Tool:
    """A callable the agent may use.

    Args:
        name: unique name the model calls it by (letters, digits, `_` and `-`).
        fn: `fn(args, key) -> result`; `key` is the idempotency key `run_id:step`.
        side_effect: if true, every call waits for a human approval before it runs.
        args_model: pydantic model validating the arguments; its JSON schema is what a model sees.
        args_schema: instead of `args_model`, a JSON Schema and its validator (see `ArgsSchema`).
        description: one or two sentences for the model and for approvers.
        timeout_s: seconds before the call is abandoned and reported as a timeout.
        idempotent: the tool dedupes on `key`, so re-running it with the same key is safe.
        confirm: Approve asks "are you sure?" before it counts, whatever the approval policy's rule says.
        preview: `preview(args, key) -> text or JSON`, read-only: what the call would do (the rendered
            email, a diff, the rows it would touch). Run when a call is asked about, shown to the
            approvers and bound into the approval's digest; within `preview_timeout_s`.
        preview_must_match: the preview is run again just before the call starts; if it changed,
            the approval is void, nothing runs, and a fresh approval shows what changed.
        run_by_caller: the call is run outside Signoff, by the program that asked for it (an
            approval asked for over the API): Signoff decides it, hands it over and records the
            outcome its caller reports; `fn` is never called.
        approval_ttl_s: the longest people may take to decide a call of it (a caller that cannot
            wait longer says so); the approval policy's own time limit holds when it is shorter.
    """

    name: str
    fn: Callable[[dict[str, Any], str], Any]
    side_effect: bool = False
    args_model: type[BaseModel] | None = None
    description: str = ""
    timeout_s: float | None = 30.0
    idempotent: bool = False
    redact: tuple[str, ...] = field(default=())
    """Extra argument names to hide in Slack, logs and the audit log, besides the global list
    (matched exactly after normalising `camelCase` and dashes, never as a suffix)."""
    args_schema: ArgsSchema | None = None
    confirm: bool = False
    preview: Callable[[dict[str, Any], str], Any] | None = None
    preview_must_match: bool = False
    preview_timeout_s: float = 5.0
    run_by_caller: bool = False
    approval_ttl_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}: use letters, digits, '_' or '-', at most 64")
        if not callable(self.fn):
            raise TypeError(f"tool {self.name!r}: fn is not callable")
        if self.args_model is not None and not (
            isinstance(self.args_model, type) and issubclass(self.args_model, BaseModel)
        ):
            raise TypeError(f"tool {self.name!r}: args_model must be a pydantic BaseModel subclass")
        if self.args_schema is not None and not isinstance(self.args_schema, ArgsSchema):
            raise TypeError(f"tool {self.name!r}: args_schema must have a schema and a validate method")
        if self.args_schema is not None and self.args_model is not None:
            raise TypeError(f"tool {self.name!r}: give args_model or args_schema, not both")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be positive")
        if self.preview is not None and not callable(self.preview):
            raise TypeError(f"tool {self.name!r}: preview is not callable")
        if self.preview_must_match and self.preview is None:
            raise ValueError(f"tool {self.name!r}: preview_must_match needs a preview")
        if self.approval_ttl_s is not None and self.approval_ttl_s <= 0:
            raise ValueError(f"tool {self.name!r}: approval_ttl_s must be positive")
        if self.preview_timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: preview_timeout_s must be positive")

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments, as a model sees it."""
        if self.args_schema is not None:
            return self.args_schema.schema
        if self.args_model is None:
            return {"type": "object", "properties": {}, "additionalProperties": True}
        return self.args_model.model_json_schema()

    @functools.cached_property
    def contract(self) -> str:
        """A short hash of what a model and an approver are told the tool is and does: name,
        description, argument schema, side-effect, idempotency and confirm flags, time limit. A deploy
        that changes any of them changes it; one that changes only the code behind `fn` does not."""
        described = {"name": self.name, "description": self.description, "args": self.json_schema(),
                     "side_effect": self.side_effect, "idempotent": self.idempotent, "timeout_s": self.timeout_s,
                     # Only when set: a tool without it keeps the contract it had before the flag
                     # existed, so a deploy adding the flag does not supersede every pending approval.
                     **({"confirm": True} if self.confirm else {}),
                     **({"run_by_caller": True} if self.run_by_caller else {}),
                     **({"approval_ttl_s": self.approval_ttl_s} if self.approval_ttl_s is not None else {}),
                     **({"preview": "must_match" if self.preview_must_match else True} if self.preview else {})}
        text = json.dumps(described, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def validate(self, args: Any) -> dict[str, Any]:
        """Return the validated arguments as plain JSON data, or raise `ValueError` listing field errors.

        An argument the args model does not declare is an error (unless the model says
        `extra="allow"`, and then it is kept): pydantic would drop it silently, and the approver
        would be shown a call other than the one the model asked for.
        """
        return self.checked(args).args

    def checked(self, args: Any) -> CheckedArgs:
        """`validate`, and which of the validated arguments the caller left out (so the args model
        filled in its defaults): what the approval policy's rules see is the rest (`CheckedArgs.sent`)."""
        if not isinstance(args, dict):
            raise ValueError(f"arguments must be a JSON object, got {type(args).__name__}")
        if self.args_schema is not None:
            return CheckedArgs(self.args_schema.validate(args))  # a JSON Schema fills in no defaults
        if self.args_model is None:
            return CheckedArgs(args)
        try:
            model = _strict(self.args_model).model_validate(args)
        except ValidationError as exc:
            raise ValueError(describe_validation_error(exc)) from None
        validated = model.model_dump(mode="json")
        return CheckedArgs(validated, frozenset(validated.keys() - model.model_fields_set))


def contract_change(name: str, agreed: str, now: Tool | None) -> str | None:
    """Why an approval of a call to `name`, given under the tool's contract `agreed`, no longer holds:
    the tool is gone or its contract changed since (a deploy, a server that changed its tools), so the
    approver agreed to something else. None while it holds."""
    if now is None:
        return f"{name} is no longer registered since this call was proposed"
    if now.contract == agreed:
        return None
    return (f"{name} changed since this call was proposed (contract {agreed} is now {now.contract}: "
            "its description, arguments, flags or time limit differ from what was approved)")


@dataclass(frozen=True)
class CheckedArgs:
    """A call's arguments as its tool validated them."""

    args: dict[str, Any]
    """What runs and what the approver is shown: the args model's defaults filled in."""
    defaulted: frozenset[str] = frozenset()
    """The arguments the caller left out, which the args model's defaults filled in."""

    @property
    def sent(self) -> dict[str, Any]:
        """The validated arguments less the defaulted ones: what the approval policy's rules see, so
        `has(args.x)` answers for what the caller sent and a default never widens a rule."""
        return dict(without(self.args, self.defaulted))


def without(args: Mapping[str, Any], names: frozenset[str]) -> Mapping[str, Any]:
    """`args` less the arguments `names` (`args` itself when there are none to leave out)."""
    return {name: value for name, value in args.items() if name not in names} if names else args


@functools.lru_cache(maxsize=256)
def _strict(model: type[BaseModel]) -> type[BaseModel]:
    """`model`, refusing undeclared arguments unless it keeps them (`extra="allow"`)."""
    if model.model_config.get("extra") in ("allow", "forbid"):
        return model
    # A subclass with only the config changed validates exactly as `model` does, fields,
    # validators and all; its dump has the same field names.
    return type(model.__name__, (model,), {"model_config": {**model.model_config, "extra": "forbid"},
                                           "__module__": model.__module__})


def describe_validation_error(exc: ValidationError) -> str:
    """`field: message` for every error, joined, without echoing the input values."""
    parts = []
    for err in exc.errors(include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{where}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)
