"""The approvals `signoff.client` hands out (import them from there): what the API last said of one,
with the steps that follow, `Approval` for `Signoff` and `AsyncApproval` for `AsyncSignoff`."""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any

from signoff.client_wire import DECIDED, MAX_WAIT, STATUSES, error_words, jsonable, started

if TYPE_CHECKING:
    from signoff.client import Signoff
    from signoff.client_async import AsyncSignoff


def decider_words(decided_by: str | None) -> str:
    """Who decided, in words: the API names a person by their Slack id, a rule as `policy:<rule>`,
    a grant as `grant:<id>`."""
    kind, _, name = (decided_by or "").partition(":")
    if kind == "policy":
        return f"the policy rule {name!r}" if name else "Signoff's policy"
    if kind == "grant" and name:
        return f"the grant {name}"
    return decided_by or "Signoff's policy"


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
        self._update(started(self._client._post(f"{self.id}/start", {}, None)))
        return dict(self.args)

    def succeeded(self, result: Any = None) -> Approval:
        """Report that the call ran and succeeded, with what it returned (JSON, else its `repr`)."""
        return self._outcome({"ok": True, "result": jsonable(result)})

    def failed(self, error: str | BaseException) -> Approval:
        """Report that the call ran and failed, with why."""
        return self._outcome({"ok": False, "error": error_words(error)})

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
        self._update(started(await self._client._post(f"{self.id}/start", {}, None)))
        return dict(self.args)

    async def succeeded(self, result: Any = None) -> AsyncApproval:
        """Report that the call ran and succeeded, with what it returned."""
        return await self._outcome({"ok": True, "result": jsonable(result)})

    async def failed(self, error: str | BaseException) -> AsyncApproval:
        """Report that the call ran and failed, with why."""
        return await self._outcome({"ok": False, "error": error_words(error)})

    async def _outcome(self, body: dict[str, Any]) -> AsyncApproval:
        answer = await self._client._post(f"{self.id}/outcome", body, None)
        self._update(answer if answer.get("status") in STATUSES else {})
        if self.status in ("approved", "started"):
            self.status = "succeeded" if body["ok"] else "failed"
        return self
