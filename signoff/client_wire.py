"""The approval API on the wire, for `signoff.client`: the statuses an approval has, the requests'
bodies and headers, and its answers read and checked against the contract (a refusal raised as its
`SignoffError`, an answer outside the contract as `bad_response`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import httpx

from signoff.client_errors import KINDS, SignoffError, Unreachable, error_field

STATUSES: Final = ("pending", "approved", "denied", "expired", "started", "succeeded", "failed")
"""Every status an approval can have."""
DECIDED: Final = frozenset(STATUSES) - {"pending"}
"""The statuses a wait ends on: every one but "pending"."""
FINAL: Final = frozenset({"denied", "expired", "succeeded", "failed"})
"""The statuses nothing follows."""
MAX_WAIT: Final = 60
"""The longest `?wait=` the API takes, in seconds; longer waits are several requests."""

def json_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def refusal(response: httpx.Response) -> SignoffError:
    body = json_of(response)
    code = error_field(body, "code")
    message = error_field(body, "message")
    if not isinstance(code, str) or not code:
        code = f"http_{response.status_code}"
    if not isinstance(message, str):
        text = response.text.strip()
        message = f"HTTP {response.status_code}" + (f": {text[:200]}" if text else "")
    kind = KINDS.get(response.status_code, SignoffError)
    return kind(code, message, status=response.status_code, body=body)


def answer_object(response: httpx.Response, expected: tuple[int, ...]) -> dict[str, Any]:
    """The JSON object of an expected answer; a `SignoffError` for anything else."""
    if response.status_code not in expected:
        if response.status_code >= 400:
            raise refusal(response)
        raise SignoffError("bad_response", f"unexpected HTTP {response.status_code}",
                           status=response.status_code, body=json_of(response))
    body = json_of(response)
    if not isinstance(body, dict):
        raise SignoffError("bad_response", "the answer is not a JSON object", status=response.status_code)
    return body


def approval_body(body: dict[str, Any], status: int) -> dict[str, Any]:
    """`body` once checked to describe an approval: an `id`, a known `status`, `args` an object."""
    if not isinstance(body.get("id"), str) or not body["id"]:
        raise SignoffError("bad_response", "the approval has no id", status=status, body=body)
    if body.get("status") not in STATUSES:
        raise SignoffError("bad_response", f"unknown approval status {body.get('status')!r}",
                           status=status, body=body)
    if "args" in body and not isinstance(body["args"], dict):
        raise SignoffError("bad_response", "the approval's args are not an object", status=status, body=body)
    return body


def unreachable(exc: httpx.HTTPError, url: str) -> Unreachable:
    what = "did not answer in time" if isinstance(exc, httpx.TimeoutException) else "could not be reached"
    return Unreachable("unreachable", f"Signoff at {url} {what} ({type(exc).__name__}: {exc})")


def jsonable(value: Any) -> Any:
    """`value` if JSON can carry it, else its `repr`: an outcome is reported whatever the call returned."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def request_body(tool: str, args: Mapping[str, Any], key: str, optional: Mapping[str, Any]) -> dict[str, Any]:
    if not key:
        raise ValueError("key: an idempotency key is required")
    return {"tool": tool, "args": dict(args), "key": key,
            **{name: value for name, value in optional.items() if value is not None}}

def started(body: dict[str, Any]) -> dict[str, Any]:
    """What `start` answered (the `args` and `key` to run), as an update of the approval: "started"."""
    if not isinstance(body.get("args"), dict):
        raise SignoffError("bad_response", "start answered no args to run", body=body)
    return {**body, "status": body["status"] if body.get("status") in STATUSES else "started"}


def error_words(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return error


def headers(api_key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}", "accept": "application/json"}


def wait_timeout(base: float, wait: int) -> httpx.Timeout:
    """A long poll may keep the answer `wait` seconds: read for that long, and `base` more."""
    return httpx.Timeout(base, read=base + wait)

