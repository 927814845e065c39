"""The errors of `signoff.client` (import them from there): every refusal of the approval API is a
`SignoffError` carrying the API's stable `code` and the HTTP status, and its kinds a caller may want
to tell apart are subclasses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from signoff.client_approvals import Approval, AsyncApproval


class SignoffError(Exception):
    """The API refused a request, answered something that is not its contract, or did not answer.

    `code` is the API's stable error code (`"unauthorized"`, `"forbidden"`, ...), or one of the
    client's own: `"unreachable"` (no answer), `"bad_response"` (an answer outside the contract);
    `status` is the HTTP status, None when there was no answer; `body` is the answer's JSON, if any.
    """

    def __init__(self, code: str, message: str, *, status: int | None = None, body: Any = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status
        self.body = body

    @property
    def approval_status(self) -> str | None:
        """The approval's status when the answer names one (a 409 on `start` does)."""
        found = error_field(self.body, "status")
        return found if isinstance(found, str) else None


class Unauthorized(SignoffError):
    """401: no API key, or one that is wrong or revoked."""


class Forbidden(SignoffError):
    """403: the tool is outside the API key's scope."""


class Conflict(SignoffError):
    """409: the idempotency key was used for other content, or the approval was started already."""


class Unreachable(SignoffError):
    """No answer from Signoff: it could not be reached, or it did not answer in time."""


class NotApproved(SignoffError):
    """What `gated` raises when the call may not run: its `code` is the approval's status ("denied",
    "expired"), or "timeout" when nobody decided in time; its message is the decision's reason."""

    def __init__(self, code: str, message: str, *, approval: Approval | AsyncApproval) -> None:
        super().__init__(code, message, body=approval.raw)
        self.approval = approval


KINDS: Mapping[int, type[SignoffError]] = {401: Unauthorized, 403: Forbidden, 409: Conflict}
"""The kind of refusal each HTTP status is; any other refusal is a plain `SignoffError`."""


def error_field(body: Any, name: str) -> Any:
    """`body[name]`, or `body["error"][name]`: the API's refusals say `{"error": {"code": ...}}`."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict) and name in error:
        return error[name]
    return body.get(name)

