"""`AsyncSignoff`, the asyncio client of `signoff.client` (import it from there)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar

import httpx

from signoff.client_approvals import AsyncApproval
from signoff.client_errors import NotApproved
from signoff.client_gating import Arguments, KeyFor, areport, idempotency_key
from signoff.client_wire import (
    MAX_WAIT,
    answer_object,
    approval_body,
    headers,
    json_of,
    refusal,
    request_body,
    unreachable,
    wait_timeout,
)

P = ParamSpec("P")
R = TypeVar("R")


class AsyncSignoff:
    """`Signoff` for asyncio: the same API, with coroutines; `gated` decorates coroutine functions."""

    def __init__(self, url: str, api_key: str, *, timeout: float = 10.0,
                 http: httpx.AsyncClient | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._own = http is None
        self._http = http if http is not None else httpx.AsyncClient(timeout=timeout)
        self._headers = headers(api_key)

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
        body = request_body(tool, args, key, {"reason": reason, "requester": requester, "channel": channel,
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
            raise unreachable(exc, self.url) from exc
        if response.status_code == 404:
            return None
        return AsyncApproval(self, approval_body(answer_object(response, (200,)), response.status_code))

    def gated(self, *, tool: str, key: str | KeyFor | None = None, reason: str | None = None,
              timeout: float | None = None, **request: Any
              ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """A decorator for coroutine functions; see `Signoff.gated`."""

        def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"{getattr(fn, '__qualname__', fn)!s} is not a coroutine function: "
                                "gate it with Signoff")
            arguments = Arguments(fn)

            @functools.wraps(fn)
            async def gated_call(*args: P.args, **kwargs: P.kwargs) -> R:
                named = arguments.named(args, kwargs)
                approval = await self.request(tool, named, key=idempotency_key(key, tool, named), reason=reason, **request)
                await approval.wait(timeout)
                if not approval.approved:
                    raise NotApproved(approval.status if approval.decided else "timeout",
                                      approval._not_approved(timeout), approval=approval)
                positional, keywords = arguments.call(await approval.start())
                try:
                    result = await fn(*positional, **keywords)
                except BaseException as exc:
                    await areport(approval.failed(exc), approval)
                    raise
                await areport(approval.succeeded(result), approval)
                return result

            return gated_call

        return decorate

    async def _get(self, approval_id: str, wait: int) -> dict[str, Any]:
        url = f"{self.url}/v1/approvals/{approval_id}"
        try:
            response = await self._http.get(url, params={"wait": wait} if wait else None, headers=self._headers,
                                            timeout=wait_timeout(self.timeout, wait))
        except httpx.HTTPError as exc:
            raise unreachable(exc, self.url) from exc
        return approval_body(answer_object(response, (200,)), response.status_code)

    async def _post(self, path: str, body: dict[str, Any], expected: tuple[int, ...] | None) -> dict[str, Any]:
        url = f"{self.url}/v1/approvals" + (f"/{path}" if path else "")
        try:
            response = await self._http.post(url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise unreachable(exc, self.url) from exc
        if expected is None:
            if not response.is_success:
                raise refusal(response)
            answer = json_of(response)
            return answer if isinstance(answer, dict) else {}
        return approval_body(answer_object(response, expected), response.status_code)

