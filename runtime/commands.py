"""What a person asks of a run that its worker carries out: `Cancel | Extend | Retry | Reconcile | Edit |
RequestAgain`.

Pure. A command is left with the run (as JSON, `{"op": ..., "by": ..., ...}`) for whichever worker
drives it next; each is read back as one of these values, or refused as unknown.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError


class _Command(BaseModel):
    # Lenient on read: a command written by another version may carry fields this one ignores.
    model_config = ConfigDict(frozen=True, extra="ignore")

    by: str | None = None
    """Who asked."""
    shown_version: int | None = None
    """The run's version on the message the button was pressed on (None: not from a message)."""

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    @property
    def name(self) -> str:
        """`extend`, `cancel`, `retry` or `reconcile.<action>`: what was asked, as people are told it."""
        return str(self.model_dump(include={"op"})["op"])


class Cancel(_Command):
    op: Literal["cancel"] = "cancel"
    reason: str = ""


class Extend(_Command):
    op: Literal["extend"] = "extend"
    limits: dict[str, int | float] = Field(default_factory=dict)
    """The raised limits (none for a stalled run, which goes on with its budget as it is)."""


class Retry(_Command):
    op: Literal["retry"] = "retry"


ReconcileAction = Literal["done", "retry", "abort"]


class Reconcile(_Command):
    op: Literal["reconcile"] = "reconcile"
    action: ReconcileAction
    result: JsonValue = None
    """`done`: what the call really returned."""
    note: str = ""

    @property
    def name(self) -> str:
        return f"reconcile.{self.action}"

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "result": self.result}  # a null result is still said


class Edit(_Command):
    op: Literal["edit"] = "edit"
    approval_id: str
    """The approval the person edited: taken only while it is still pending, with `digest`."""
    digest: str
    args: dict[str, JsonValue]
    """The call's arguments as the person changed them (already valid for its tool)."""
    key: str | None = None
    """The edited call's key: one of the calls of a turn that made several (None: the run's pending call)."""


class RequestAgain(_Command):
    """Ask again about the call of a run that expired with nobody deciding it."""

    op: Literal["request_again"] = "request_again"


Command = Cancel | Extend | Retry | Reconcile | Edit | RequestAgain
_COMMAND: TypeAdapter[Command] = TypeAdapter(Annotated[Command, Field(discriminator="op")])


def parse_command(raw: Any) -> Command | None:
    """The command stored as `raw`, or None if it is not one this version knows."""
    try:
        return _COMMAND.validate_python(raw)
    except ValidationError:
        return None


def request_name(raw: Any) -> str:
    """What a stored command asked (see `_Command.name`), even of one this version cannot read."""
    command = parse_command(raw)
    if command is not None:
        return command.name
    return str(raw.get("op")) if isinstance(raw, dict) else "request"
