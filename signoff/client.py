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
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, ParamSpec, TypeVar

import httpx

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
    "verify_receipt",
]

log = logging.getLogger(__name__)

STATUSES: Final = ("pending", "approved", "denied", "expired", "started", "succeeded", "failed")
"""Every status an approval can have."""
DECIDED: Final = frozenset(STATUSES) - {"pending"}
"""The statuses a wait ends on: every one but "pending"."""
FINAL: Final = frozenset({"denied", "expired", "succeeded", "failed"})
"""The statuses nothing follows."""
MAX_WAIT: Final = 60
"""The longest `?wait=` the API takes, in seconds; longer waits are several requests."""

P = ParamSpec("P")
R = TypeVar("R")


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
        found = _field(self.body, "status")
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


_KINDS: Mapping[int, type[SignoffError]] = {401: Unauthorized, 403: Forbidden, 409: Conflict}


def decider_words(decided_by: str | None) -> str:
    """Who decided, in words: the API names a person by their Slack id, a rule as `policy:<rule>`,
    a grant as `grant:<id>`."""
    kind, _, name = (decided_by or "").partition(":")
    if kind == "policy":
        return f"the policy rule {name!r}" if name else "Signoff's policy"
    if kind == "grant" and name:
        return f"the grant {name}"
    return decided_by or "Signoff's policy"


def _field(body: Any, name: str) -> Any:
    """`body[name]`, or `body["error"][name]`: the API's refusals say `{"error": {"code": ...}}`."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict) and name in error:
        return error[name]
    return body.get(name)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _refusal(response: httpx.Response) -> SignoffError:
    body = _json(response)
    code = _field(body, "code")
    message = _field(body, "message")
    if not isinstance(code, str) or not code:
        code = f"http_{response.status_code}"
    if not isinstance(message, str):
        text = response.text.strip()
        message = f"HTTP {response.status_code}" + (f": {text[:200]}" if text else "")
    kind = _KINDS.get(response.status_code, SignoffError)
    return kind(code, message, status=response.status_code, body=body)


def _answer(response: httpx.Response, expected: tuple[int, ...]) -> dict[str, Any]:
    """The JSON object of an expected answer; a `SignoffError` for anything else."""
    if response.status_code not in expected:
        if response.status_code >= 400:
            raise _refusal(response)
        raise SignoffError("bad_response", f"unexpected HTTP {response.status_code}",
                           status=response.status_code, body=_json(response))
    body = _json(response)
    if not isinstance(body, dict):
        raise SignoffError("bad_response", "the answer is not a JSON object", status=response.status_code)
    return body


def _approval_body(body: dict[str, Any], status: int) -> dict[str, Any]:
    """`body` once checked to describe an approval: an `id`, a known `status`, `args` an object."""
    if not isinstance(body.get("id"), str) or not body["id"]:
        raise SignoffError("bad_response", "the approval has no id", status=status, body=body)
    if body.get("status") not in STATUSES:
        raise SignoffError("bad_response", f"unknown approval status {body.get('status')!r}",
                           status=status, body=body)
    if "args" in body and not isinstance(body["args"], dict):
        raise SignoffError("bad_response", "the approval's args are not an object", status=status, body=body)
    return body


def _unreachable(exc: httpx.HTTPError, url: str) -> Unreachable:
    what = "did not answer in time" if isinstance(exc, httpx.TimeoutException) else "could not be reached"
    return Unreachable("unreachable", f"Signoff at {url} {what} ({type(exc).__name__}: {exc})")


def _jsonable(value: Any) -> Any:
    """`value` if JSON can carry it, else its `repr`: an outcome is reported whatever the call returned."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _request_body(tool: str, args: Mapping[str, Any], key: str, optional: Mapping[str, Any]) -> dict[str, Any]:
    if not key:
        raise ValueError("key: an idempotency key is required")
    return {"tool": tool, "args": dict(args), "key": key,
            **{name: value for name, value in optional.items() if value is not None}}


class _ApprovalFields:
    """What the API said of one approval, as last read."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.raw: dict[str, Any] = {}
        self.id: str = ""
        self.status: str = "pending"
        self.args: dict[str, Any] = {}
        self.digest: str | None = None
        self.decided_by: str | None = None
        self.reason: str | None = None
        self.expires_at: str | None = None
        self.key: str | None = None
        self.receipt: dict[str, Any] | None = None
        """The decision's signed receipt (None: not decided yet, or the server signs none)."""
        self._started_here = "deadline_seconds" in body
        self._update(body)

    def _update(self, body: dict[str, Any]) -> None:
        self.raw = {**self.raw, **body}
        self.id = str(body.get("id") or self.id)
        self.status = str(body.get("status") or self.status)
        if isinstance(body.get("args"), dict):
            self.args = dict(body["args"])
        if isinstance(body.get("receipt"), dict):
            self.receipt = dict(body["receipt"])
        for name in ("digest", "decided_by", "reason", "expires_at", "key"):
            if name in body:
                value = body[name]
                setattr(self, name, None if value is None else str(value))

    @property
    def started_here(self) -> bool:
        """The request that made this approval started its call too (`request(start=True)`, approved
        at once), and `start` has not yet handed the arguments over."""
        return self._started_here

    @property
    def decided(self) -> bool:
        """Whether the approval is no longer pending."""
        return self.status in DECIDED

    @property
    def approved(self) -> bool:
        """Whether the call may be started now."""
        return self.status == "approved"

    def _not_approved(self, waited: float | None) -> str:
        """Why a call may not run, in a few words: who denied it and why, or that nobody decided."""
        if self.status == "pending":
            return f"nobody decided within {waited:g} s" if waited is not None else "nobody decided"
        words = self.status
        if self.decided_by:
            words += f" by {decider_words(self.decided_by)}"
        return f"{words}: {self.reason}" if self.reason else words

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, status={self.status!r}, args={self.args!r})"


class Approval(_ApprovalFields):
    """One approval, as the API last described it, with the steps that follow: `wait`, `start`, and
    `succeeded` or `failed`. `args` are the arguments to run with, as approved (maybe edited)."""

    def __init__(self, client: Signoff, body: dict[str, Any]) -> None:
        super().__init__(body)
        self._client = client

    def refresh(self) -> Approval:
        """Read the approval again, without waiting."""
        self._update(self._client._get(self.id, 0))
        return self

    def wait(self, timeout: float | None = None) -> Approval:
        """Wait until the approval is decided, or `timeout` seconds (None: for as long as it takes).

        Long-polls `GET /v1/approvals/{id}?wait=N` with N at most `MAX_WAIT`, again and again. Returns
        this approval, its `status` still "pending" if nobody decided in time.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.decided:
            remaining = MAX_WAIT if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                break
            asked = time.monotonic()
            self._update(self._client._get(self.id, min(MAX_WAIT, math.ceil(remaining))))
            if not self.decided and time.monotonic() - asked < 0.5:
                # Answered "pending" at once, though asked to wait: not a long poll, so not a busy loop.
                time.sleep(min(1.0, max(0.0, remaining - 0.5)) if deadline is not None else 1.0)
        return self

    def start(self) -> dict[str, Any]:
        """Consume the approval (it runs exactly once) and return the arguments to run with.

        Raises `Conflict` when it was started before (or is not approved); its `approval_status` says
        which status the approval has. Asked with `start=True`, a call the policy approved at once
        was started by the request itself: its first `start` asks nothing more."""
        if self._started_here:
            self._started_here = False
            return dict(self.args)
        self._update(_started(self._client._post(f"{self.id}/start", {}, None)))
        return dict(self.args)

    def succeeded(self, result: Any = None) -> Approval:
        """Report that the call ran and succeeded, with what it returned (JSON, else its `repr`)."""
        return self._outcome({"ok": True, "result": _jsonable(result)})

    def failed(self, error: str | BaseException) -> Approval:
        """Report that the call ran and failed, with why."""
        return self._outcome({"ok": False, "error": _error_words(error)})

    def _outcome(self, body: dict[str, Any]) -> Approval:
        answer = self._client._post(f"{self.id}/outcome", body, None)
        self._update(answer if answer.get("status") in STATUSES else {})
        if self.status in ("approved", "started"):
            self.status = "succeeded" if body["ok"] else "failed"
        return self


class AsyncApproval(_ApprovalFields):
    """`Approval` for `AsyncSignoff`: the same fields, and the same steps as coroutines."""

    def __init__(self, client: AsyncSignoff, body: dict[str, Any]) -> None:
        super().__init__(body)
        self._client = client

    async def refresh(self) -> AsyncApproval:
        """Read the approval again, without waiting."""
        self._update(await self._client._get(self.id, 0))
        return self

    async def wait(self, timeout: float | None = None) -> AsyncApproval:
        """Wait until the approval is decided, or `timeout` seconds; see `Approval.wait`."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self.decided:
            remaining = MAX_WAIT if deadline is None else deadline - loop.time()
            if remaining <= 0:
                break
            asked = loop.time()
            self._update(await self._client._get(self.id, min(MAX_WAIT, math.ceil(remaining))))
            if not self.decided and loop.time() - asked < 0.5:
                await asyncio.sleep(min(1.0, max(0.0, remaining - 0.5)) if deadline is not None else 1.0)
        return self

    async def start(self) -> dict[str, Any]:
        """Consume the approval and return the arguments to run with; see `Approval.start`."""
        if self._started_here:
            self._started_here = False
            return dict(self.args)
        self._update(_started(await self._client._post(f"{self.id}/start", {}, None)))
        return dict(self.args)

    async def succeeded(self, result: Any = None) -> AsyncApproval:
        """Report that the call ran and succeeded, with what it returned."""
        return await self._outcome({"ok": True, "result": _jsonable(result)})

    async def failed(self, error: str | BaseException) -> AsyncApproval:
        """Report that the call ran and failed, with why."""
        return await self._outcome({"ok": False, "error": _error_words(error)})

    async def _outcome(self, body: dict[str, Any]) -> AsyncApproval:
        answer = await self._client._post(f"{self.id}/outcome", body, None)
        self._update(answer if answer.get("status") in STATUSES else {})
        if self.status in ("approved", "started"):
            self.status = "succeeded" if body["ok"] else "failed"
        return self


def _started(body: dict[str, Any]) -> dict[str, Any]:
    """What `start` answered (the `args` and `key` to run), as an update of the approval: "started"."""
    if not isinstance(body.get("args"), dict):
        raise SignoffError("bad_response", "start answered no args to run", body=body)
    return {**body, "status": body["status"] if body.get("status") in STATUSES else "started"}


def _error_words(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return error


def _headers(api_key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}", "accept": "application/json"}


def _wait_timeout(base: float, wait: int) -> httpx.Timeout:
    """A long poll may keep the answer `wait` seconds: read for that long, and `base` more."""
    return httpx.Timeout(base, read=base + wait)


class _Arguments:
    """How a gated function's call becomes the `args` of an approval, and back.

    Every parameter is named in `args` (defaults included); extra keyword arguments of a `**kwargs`
    parameter are named as themselves. A function with `*args` cannot be gated: they have no names.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.signature = inspect.signature(fn)
        kinds = {p.kind for p in self.signature.parameters.values()}
        if inspect.Parameter.VAR_POSITIONAL in kinds:
            raise TypeError(f"{fn.__qualname__}: a gated function cannot take *args (they have no names)")

    def named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if self.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return named

    def call(self, approved: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments that pass `approved` to the function."""
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        rest = dict(approved)
        for name, parameter in self.signature.parameters.items():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                continue
            if name not in rest:
                continue  # the function's default applies
            value = rest.pop(name)
            if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
                positional.append(value)
            else:
                keywords[name] = value
        keywords.update(rest)  # to **kwargs; a function without one refuses them, as it would any call
        return positional, keywords


KeyFor = Callable[[dict[str, Any]], str]
"""Makes the idempotency key of a gated call from its arguments."""


def _key(key: str | KeyFor | None, tool: str, args: dict[str, Any]) -> str:
    if key is None:
        return f"{tool}:{uuid.uuid4()}"
    return key(args) if callable(key) else key


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
        self._headers = _headers(api_key)

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
        body = _request_body(tool, args, key, {"reason": reason, "requester": requester, "channel": channel,
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
            raise _unreachable(exc, self.url) from exc
        if response.status_code == 404:
            return None
        return Approval(self, _approval_body(_answer(response, (200,)), response.status_code))

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
            arguments = _Arguments(fn)

            @functools.wraps(fn)
            def gated_call(*args: P.args, **kwargs: P.kwargs) -> R:
                named = arguments.named(args, kwargs)
                approval = self.request(tool, named, key=_key(key, tool, named), reason=reason, **request)
                approval.wait(timeout)
                if not approval.approved:
                    raise NotApproved(approval.status if approval.decided else "timeout",
                                      approval._not_approved(timeout), approval=approval)
                positional, keywords = arguments.call(approval.start())
                try:
                    result = fn(*positional, **keywords)
                except BaseException as exc:
                    _report(functools.partial(approval.failed, exc), approval)
                    raise
                _report(functools.partial(approval.succeeded, result), approval)
                return result

            return gated_call

        return decorate

    def _get(self, approval_id: str, wait: int) -> dict[str, Any]:
        url = f"{self.url}/v1/approvals/{approval_id}"
        try:
            response = self._http.get(url, params={"wait": wait} if wait else None, headers=self._headers,
                                      timeout=_wait_timeout(self.timeout, wait))
        except httpx.HTTPError as exc:
            raise _unreachable(exc, self.url) from exc
        return _approval_body(_answer(response, (200,)), response.status_code)

    def _post(self, path: str, body: dict[str, Any], expected: tuple[int, ...] | None) -> dict[str, Any]:
        url = f"{self.url}/v1/approvals" + (f"/{path}" if path else "")
        try:
            response = self._http.post(url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise _unreachable(exc, self.url) from exc
        if expected is None:  # start and outcome: any 2xx, the body checked by the caller
            if not response.is_success:
                raise _refusal(response)
            answer = _json(response)
            return answer if isinstance(answer, dict) else {}
        return _approval_body(_answer(response, expected), response.status_code)


class AsyncSignoff:
    """`Signoff` for asyncio: the same API, with coroutines; `gated` decorates coroutine functions."""

    def __init__(self, url: str, api_key: str, *, timeout: float = 10.0,
                 http: httpx.AsyncClient | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._own = http is None
        self._http = http if http is not None else httpx.AsyncClient(timeout=timeout)
        self._headers = _headers(api_key)

    async def __aenter__(self) -> AsyncSignoff:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (only those of a client made here)."""
        if self._own:
            await self._http.aclose()

    async def request(self, tool: str, args: Mapping[str, Any], *, key: str, reason: str | None = None,
                      requester: str | None = None, channel: str | None = None, preview: str | None = None,
                      ttl: int | None = None, description: str | None = None,
                      side_effect: bool | None = None, callback_url: str | None = None,
                      timeout: float | None = None, start: bool = False) -> AsyncApproval:
        """Ask to run `tool` with `args`; see `Signoff.request`."""
        body = _request_body(tool, args, key, {"reason": reason, "requester": requester, "channel": channel,
                                               "preview": preview, "ttl": ttl, "description": description,
                                               "side_effect": side_effect, "callback_url": callback_url,
                                               "timeout": timeout, "start": start or None})
        return AsyncApproval(self, await self._post("", body, (200, 201)))

    async def get(self, approval_id: str, *, wait: int = 0) -> AsyncApproval:
        """An approval by its id; see `Signoff.get`."""
        return AsyncApproval(self, await self._get(approval_id, min(MAX_WAIT, max(0, wait))))

    async def find(self, key: str) -> AsyncApproval | None:
        """The approval asked for under the idempotency key `key`; see `Signoff.find`."""
        try:
            response = await self._http.get(f"{self.url}/v1/approvals", params={"key": key}, headers=self._headers)
        except httpx.HTTPError as exc:
            raise _unreachable(exc, self.url) from exc
        if response.status_code == 404:
            return None
        return AsyncApproval(self, _approval_body(_answer(response, (200,)), response.status_code))

    def gated(self, *, tool: str, key: str | KeyFor | None = None, reason: str | None = None,
              timeout: float | None = None, **request: Any
              ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """A decorator for coroutine functions; see `Signoff.gated`."""

        def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"{getattr(fn, '__qualname__', fn)!s} is not a coroutine function: "
                                "gate it with Signoff")
            arguments = _Arguments(fn)

            @functools.wraps(fn)
            async def gated_call(*args: P.args, **kwargs: P.kwargs) -> R:
                named = arguments.named(args, kwargs)
                approval = await self.request(tool, named, key=_key(key, tool, named), reason=reason, **request)
                await approval.wait(timeout)
                if not approval.approved:
                    raise NotApproved(approval.status if approval.decided else "timeout",
                                      approval._not_approved(timeout), approval=approval)
                positional, keywords = arguments.call(await approval.start())
                try:
                    result = await fn(*positional, **keywords)
                except BaseException as exc:
                    await _areport(approval.failed(exc), approval)
                    raise
                await _areport(approval.succeeded(result), approval)
                return result

            return gated_call

        return decorate

    async def _get(self, approval_id: str, wait: int) -> dict[str, Any]:
        url = f"{self.url}/v1/approvals/{approval_id}"
        try:
            response = await self._http.get(url, params={"wait": wait} if wait else None, headers=self._headers,
                                            timeout=_wait_timeout(self.timeout, wait))
        except httpx.HTTPError as exc:
            raise _unreachable(exc, self.url) from exc
        return _approval_body(_answer(response, (200,)), response.status_code)

    async def _post(self, path: str, body: dict[str, Any], expected: tuple[int, ...] | None) -> dict[str, Any]:
        url = f"{self.url}/v1/approvals" + (f"/{path}" if path else "")
        try:
            response = await self._http.post(url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise _unreachable(exc, self.url) from exc
        if expected is None:
            if not response.is_success:
                raise _refusal(response)
            answer = _json(response)
            return answer if isinstance(answer, dict) else {}
        return _approval_body(_answer(response, expected), response.status_code)


def _report(send: Callable[[], object], approval: Approval) -> None:
    """Report an outcome; the call has run, so a failure to report it is logged, not raised over
    the call's own result or exception."""
    try:
        send()
    except SignoffError as exc:
        log.warning("could not report the outcome of approval %s: %s", approval.id, exc)


async def _areport(sending: Awaitable[object], approval: AsyncApproval) -> None:
    try:
        await sending
    except SignoffError as exc:
        log.warning("could not report the outcome of approval %s: %s", approval.id, exc)

