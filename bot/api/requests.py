"""What the approval API accepts, and the refusals it answers with: each a status and a stable `code`.

Every body is checked whole before anything is done with it: a request that is not what it says
changes nothing. Strictly: `"false"` is not a boolean, nor `true` a number of seconds (a side effect
sent as the string "false" must not pass for a read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from signoff.runtime.caller_runs import DEFAULT_TIMEOUT_S
from signoff.tools.base import TOOL_NAME

MAX_BODY_BYTES = 256_000
"""A call's arguments and preview: far more than any sane call needs, far less than harm."""
MAX_WAIT_S = 60
"""The longest a `GET ?wait=N` holds its answer."""


@dataclass(frozen=True)
class ApiError(Exception):
    """A refusal: the HTTP status, the stable `code` a client branches on, and words for people."""

    status: int
    code: str
    message: str
    extra: dict[str, Any] | None = None
    retry_after: float | None = None
    """Seconds until the request may be made again (a `Retry-After` header)."""

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **(self.extra or {})}}


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "a valid API key is required: Authorization: Bearer <key> "
                                         "(`signoff keys create` makes one)")


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", what)


class CreateApproval(BaseModel):
    """`POST /v1/approvals`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tool: str = Field(pattern=TOOL_NAME.pattern)
    args: dict[str, JsonValue]
    key: str = Field(min_length=1, max_length=200)
    """The caller's idempotency key: the same key again answers with the same approval."""
    reason: str | None = Field(default=None, max_length=2000)
    requester: str | None = Field(default=None, max_length=200)
    """Who the caller says asked, shown on the card as its words (the key is what is known)."""
    channel: str | None = Field(default=None, max_length=32)
    preview: JsonValue = None
    description: str = Field(default="", max_length=2000)
    side_effect: bool = True
    ttl: int | None = Field(default=None, ge=1, le=30 * 86_400)
    """Seconds the caller will wait for a decision; the policy's time limit holds when shorter."""
    timeout: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=86_400)
    """Seconds the caller may take to run the call once it started it, before a person is asked."""
    callback_url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://[^/\s]+")
    """Where to POST the approval, signed, once it is decided."""
    start: bool = False
    """Start the call in this request when the policy approves it at once: one round trip for a read."""


class Outcome(BaseModel):
    """`POST /v1/approvals/{id}/outcome`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    ok: bool
    result: JsonValue = None
    error: str | None = Field(default=None, max_length=4000)
    seconds: float = Field(default=0.0, ge=0)


Model = TypeVar("Model", bound=BaseModel)


def parsed(model: type[Model], body: Any) -> Model:
    """`body` as `model`, or a 400 naming each field that is wrong."""
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "the body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in error['loc']) or 'body'}: {error['msg']}"
                             for error in exc.errors(include_url=False, include_input=False))
        raise ApiError(400, "invalid_request", problems) from None
