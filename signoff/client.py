"""A client of Signoff's HTTP approval API (`/v1/approvals`), for code that runs its own side effects.

Ask for an approval, wait for a person (or the policy) to decide, consume it exactly once, run the
call with the arguments as approved (an approver may have edited them), and report how it went:

    from signoff.client import Signoff

    with Signoff("https://signoff.example.com", api_key) as signoff:
        approval = signoff.request("refund", {"order": "A-17", "amount": 20}, key="refund-A-17")
        approval.wait(timeout=600)
        if approval.status == "approved":
            args = approval.start()          # 409 (Conflict) if it was started before
            approval.succeeded(refund(**args))

or, the same steps in one decorator:

    @signoff.gated(tool="refund")
    def refund(order: str, amount: int) -> dict[str, object]: ...

`AsyncSignoff` is the same client for asyncio. Every refusal of the API is a `SignoffError` carrying the
API's stable `code` and the HTTP status; `Unauthorized` (401), `Forbidden` (403) and `Conflict` (409)
are its kinds a caller may want to tell apart, `Unreachable` is no answer at all, and `NotApproved` is
what `gated` raises when the answer is not "approved".

A decided approval carries its signed receipt (`Approval.receipt`, when the server has a signing
key). `verify_receipt(receipt, public_key, tool=, args=)` checks one offline, so a tool or service
can refuse to act without a valid receipt for exactly the arguments it is about to use:

    verify_receipt(approval.receipt, public_key_pem, tool="refund", args=args)  # InvalidReceipt if not

Everything is imported from here; the parts live beside it, by subject: `client_errors.py` (the
errors), `client_wire.py` (the requests and the answers on the wire), `client_approvals.py` (the
approvals and their steps), `client_gating.py` (what `gated` needs) and `client_async.py`
(`AsyncSignoff`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

import httpx

from signoff.client_approvals import Approval, AsyncApproval, decider_words
from signoff.client_async import AsyncSignoff
from signoff.client_errors import (
    Conflict,
    Forbidden,
    NotApproved,
    SignoffError,
    Unauthorized,
    Unreachable,
)
from signoff.client_gating import Arguments, KeyFor, idempotency_key, report
from signoff.client_wire import (
    DECIDED,
    FINAL,
    MAX_WAIT,
    STATUSES,
    answer_object,
    approval_body,
    headers,
    json_of,
    refusal,
    request_body,
    unreachable,
    wait_timeout,
)
from signoff.receipts import InvalidReceipt, verify_receipt

__all__ = [
    "DECIDED",
    "FINAL",
    "MAX_WAIT",
    "STATUSES",
    "Approval",
    "AsyncApproval",
    "AsyncSignoff",
    "Conflict",
    "Forbidden",
    "InvalidReceipt",
    "NotApproved",
    "Signoff",
    "SignoffError",
    "Unauthorized",
    "Unreachable",
    "decider_words",
    "verify_receipt",
]

P = ParamSpec("P")
R = TypeVar("R")


class Signoff:
    """A client of Signoff's approval API: `Signoff(url, api_key)`.

    `url` is where `signoff serve` answers (`https://signoff.example.com`); `api_key` is sent as
    `Authorization: Bearer`. `timeout` bounds each request (a long poll gets its wait on top). Close
    it, or use it as a context manager; pass `http` to bring an `httpx.Client` of your own (not closed
    here).
    """

    def __init__(self, url: str, api_key: str, *, timeout: float = 10.0, http: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._own = http is None
        self._http = http if http is not None else httpx.Client(timeout=timeout)
        self._headers = headers(api_key)

    def __enter__(self) -> Signoff:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (only those of a client made here)."""
        if self._own:
            self._http.close()

    def request(self, tool: str, args: Mapping[str, Any], *, key: str, reason: str | None = None,
                requester: str | None = None, channel: str | None = None, preview: str | None = None,
                ttl: int | None = None, description: str | None = None,
                side_effect: bool | None = None, callback_url: str | None = None,
                timeout: float | None = None, start: bool = False) -> Approval:
        """Ask to run `tool` with `args`: `POST /v1/approvals`.

        `key` is the idempotency key (unique per API key): asking again with the same key and content
        returns the same approval, with other content raises `Conflict`. The policy decides at once
        ("approved", "denied") or a person is asked ("pending"); `Approval.wait` waits for them, or
        with `callback_url` Signoff POSTs the approval there, signed, once it is decided. `timeout`:
        the seconds the caller may take to run the call once started before a person is asked
        what came of it (default 900). `start`: where the policy approves the call at once, start
        it in the same request (the approval's `start` then asks nothing more): one round trip.
        """
        body = request_body(tool, args, key, {"reason": reason, "requester": requester, "channel": channel,
                                               "preview": preview, "ttl": ttl, "description": description,
                                               "side_effect": side_effect, "callback_url": callback_url,
                                               "timeout": timeout, "start": start or None})
        return Approval(self, self._post("", body, (200, 201)))

    def get(self, approval_id: str, *, wait: int = 0) -> Approval:
        """An approval by its id; with `wait`, once decided or after `wait` seconds (at most 60)."""
        return Approval(self, self._get(approval_id, min(MAX_WAIT, max(0, wait))))

    def find(self, key: str) -> Approval | None:
        """The approval asked for under the idempotency key `key` with this API key; None if none was."""
        try:
            response = self._http.get(f"{self.url}/v1/approvals", params={"key": key}, headers=self._headers)
        except httpx.HTTPError as exc:
            raise unreachable(exc, self.url) from exc
        if response.status_code == 404:
            return None
        return Approval(self, approval_body(answer_object(response, (200,)), response.status_code))

    def gated(self, *, tool: str, key: str | KeyFor | None = None, reason: str | None = None,
              timeout: float | None = None, **request: Any) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: each call of the function asks Signoff first, and runs only once approved.

        The call's arguments (by parameter name) are the approval's `args`. Once approved, the
        approval is started (consumed) and the function runs exactly once, with the arguments as
        approved: an approver's edits replace the caller's. Its return value is reported with
        `succeeded`, its exception with `failed` (and raised again). A call that is denied, expires or
        is not decided within `timeout` seconds raises `NotApproved` without running.

        `key` is the idempotency key: a string, a function of the arguments, or (None) a new one for
        every call. Other keyword arguments (`requester`, `channel`, `ttl`, ...) go to `request`.
        """

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(fn):
                raise TypeError(f"{fn.__qualname__} is a coroutine function: gate it with AsyncSignoff")
            arguments = Arguments(fn)

            @functools.wraps(fn)
            def gated_call(*args: P.args, **kwargs: P.kwargs) -> R:
                named = arguments.named(args, kwargs)
                approval = self.request(tool, named, key=idempotency_key(key, tool, named), reason=reason, **request)
                approval.wait(timeout)
                if not approval.approved:
                    raise NotApproved(approval.status if approval.decided else "timeout",
                                      approval._not_approved(timeout), approval=approval)
                positional, keywords = arguments.call(approval.start())
                try:
                    result = fn(*positional, **keywords)
                except BaseException as exc:
                    report(functools.partial(approval.failed, exc), approval)
                    raise
                report(functools.partial(approval.succeeded, result), approval)
                return result

            return gated_call

        return decorate

    def _get(self, approval_id: str, wait: int) -> dict[str, Any]:
        url = f"{self.url}/v1/approvals/{approval_id}"
        try:
            response = self._http.get(url, params={"wait": wait} if wait else None, headers=self._headers,
                                      timeout=wait_timeout(self.timeout, wait))
        except httpx.HTTPError as exc:
            raise unreachable(exc, self.url) from exc
        return approval_body(answer_object(response, (200,)), response.status_code)

    def _post(self, path: str, body: dict[str, Any], expected: tuple[int, ...] | None) -> dict[str, Any]:
        url = f"{self.url}/v1/approvals" + (f"/{path}" if path else "")
        try:
            response = self._http.post(url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise unreachable(exc, self.url) from exc
        if expected is None:  # start and outcome: any 2xx, the body checked by the caller
            if not response.is_success:
                raise refusal(response)
            answer = json_of(response)
            return answer if isinstance(answer, dict) else {}
        return approval_body(answer_object(response, expected), response.status_code)
