"""Telling a caller its approval was decided: a signed POST to the `callback_url` it asked with.

A scheduler job, on every replica: each decided approval that asked for a callback and has none
delivered is claimed (so one replica tries it at a time), POSTed as the approval's JSON, the same
as `GET /v1/approvals/{id}` answers it, signed as the audit webhook's events are (`Signoff-Signature:
t=<unix>,v1=<HMAC-SHA256 of "<t>.<body>">`, with the key's callback secret), and tried again with
backoff until the caller's server answers 2xx. At least once: a receiver dedupes by `id`.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import httpx
from apscheduler.schedulers.background import BackgroundScheduler

from signoff.runtime.audit_webhook import SIGNATURE_HEADER, retry_after, signature
from signoff.runtime.digests import canonical_json

if TYPE_CHECKING:
    from signoff.bot.api.app import ApprovalApi
    from signoff.runtime.api_keys import ApiKeys

log = logging.getLogger("signoff.bot.api.callbacks")

CALLBACK_JOB = "approval-callbacks"
WINDOW = timedelta(days=2)
"""How long after its decision an approval's callback is still tried."""
FENCE = timedelta(seconds=30)
"""An attempt's hold: no other replica tries the same callback meanwhile."""
EVENT = "approval.decided"


class DueCallbacks(Protocol):
    """Where the callbacks' state is kept (the store's database: `adapters.api_callbacks`)."""

    def due(self, window: timedelta, limit: int = 50) -> list[str]: ...

    def claim(self, run_id: str, fence: timedelta) -> int | None: ...

    def delivered(self, run_id: str) -> None: ...

    def failed(self, run_id: str, error: str, retry_in: timedelta) -> None: ...


class Callbacks:
    """Delivers what is due, one round at a time."""

    def __init__(self, api: ApprovalApi, due: DueCallbacks, keys: ApiKeys, http: httpx.Client | None = None) -> None:
        self.api, self.due, self.keys = api, due, keys
        self.http = http or httpx.Client(timeout=10.0)

    def deliver_due(self) -> int:
        """Try every callback due now; how many were delivered."""
        delivered = 0
        for run_id in self.due.due(WINDOW):
            attempt = self.due.claim(run_id, FENCE)
            if attempt is not None:
                delivered += self._deliver(run_id, attempt)
        return delivered

    def _deliver(self, run_id: str, attempt: int) -> int:
        run = self.api.runner.get_run(run_id)
        asked: dict[str, Any] = (run.origin.get("api") or {}) if run is not None else {}
        secret = self.keys.callback_secret(str(asked.get("key") or ""))
        url = asked.get("callback_url")
        if run is None or secret is None or not isinstance(url, str):
            self.due.delivered(run_id)  # nothing can ever be sent for it: not tried again
            return 0
        body = canonical_json({"type": EVENT, "sent_at": datetime.now(UTC).isoformat(),
                               **self.api.describe(run)}).encode()
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature(secret, int(time.time()), body)}
        try:
            answer = self.http.post(url, content=body, headers=headers)
            error = None if answer.is_success else f"HTTP {answer.status_code}"
        except httpx.HTTPError as exc:  # the message may quote the URL, which may carry a token
            error = f"unreachable ({type(exc).__name__})"
        if error is None:
            self.due.delivered(run_id)
            return 1
        wait = retry_after(attempt)
        self.due.failed(run_id, error, timedelta(seconds=wait))
        log.warning("approval %s: its callback failed (%s), attempt %d; trying again in %.0f s",
                    run_id, error, attempt, wait)
        return 0


def start_callbacks(scheduler: BackgroundScheduler, callbacks: Callbacks, every_s: float = 1.0) -> None:
    def round_() -> None:
        try:
            callbacks.deliver_due()
        except Exception as exc:  # a database hiccup: the next round tries again
            log.warning("approval callbacks: a round failed: %s", exc)

    scheduler.add_job(round_, "interval", seconds=every_s, id=CALLBACK_JOB, next_run_time=datetime.now(UTC))
