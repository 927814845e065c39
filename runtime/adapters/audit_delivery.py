"""Delivering the audit events to the webhook over HTTP (`audit_webhook.AuditStream`): a round at a
time, each event POSTed in the log's order and the cursor moved past it once the receiver answered
2xx, so a failure, a restart or another replica taking over sends it again, never skips it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

import httpx

from signoff.runtime.audit import EventRow
from signoff.runtime.audit_webhook import (
    CONTENT_TYPE,
    SIGNATURE_HEADER,
    AuditCursor,
    DeliveryStatus,
    event_body,
    retry_after,
    signature,
    target_of,
)

log = logging.getLogger("signoff.runtime.audit_webhook")


@dataclass(frozen=True)
class Webhook:
    """Where the events go, and how the delivery paces itself."""

    url: str
    secret: str = field(repr=False)
    lease: timedelta = timedelta(seconds=60)
    """How long a replica delivers after it last renewed its lease; then another may take over."""
    batch: int = 100
    """Events read per round."""
    gap_wait: float = 30.0
    """Seconds a missing event number is waited for before it is passed over (see `_line`)."""
    timeout: float = 10.0


class WebhookDeliverer:
    """Delivers the events after the cursor, while this replica holds the cursor's lease."""

    def __init__(self, cursor: AuditCursor, webhook: Webhook, *, owner: str, client: httpx.Client | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cursor, self.webhook, self.owner, self.clock = cursor, webhook, owner, clock
        self.client = client or httpx.Client(timeout=webhook.timeout)
        self.delivered = self.failed = 0
        """Deliveries this process attempted, by outcome (for the metrics)."""
        self._source: str | None = None
        self._streak = 0
        self._retry_at = 0.0
        self._gap: tuple[int, float] | None = None
        self._held: tuple[int, float] | None = None
        """The cursor, and when to renew the lease, while this replica holds it."""

    def status(self) -> DeliveryStatus | None:
        return self.cursor.status()

    def deliver_due(self) -> int:
        """One round: the events due, in order, until one fails; how many were delivered."""
        if self.clock() < self._retry_at:
            return 0
        if self._source is None:
            self._source = self.cursor.start(target_of(self.webhook.url))
        through = self._holding()
        if through is None:
            return 0
        done = 0
        for position, event in self._line(through, self.cursor.after(through, self.webhook.batch)):
            if not self._post(event, self._source):
                break
            if not self.cursor.advance(self.owner, through, position):
                self._held = None  # the lease lapsed, or the cursor was moved (a new URL): claim and read it again
                break
            through, done = position, done + 1
            self._held = (through, self._held[1]) if self._held else None
        return done

    def _holding(self) -> int | None:
        """The cursor while this replica holds the lease, renewed once half of it has run (a write
        a second, on every replica, would make every other writer wait for nothing); else None."""
        now = self.clock()
        if self._held is not None and now < self._held[1]:
            return self._held[0]
        through = self.cursor.claim(self.owner, self.webhook.lease)
        self._held = None if through is None else (through, now + self.webhook.lease.total_seconds() / 2)
        return through

    def _line(self, through: int, batch: Sequence[tuple[int, EventRow]]) -> list[tuple[int, EventRow]]:
        """The events of `batch` to deliver now, up to a missing number that may yet be filled.

        PostgreSQL numbers an event when it is written, not when its transaction commits: a gap may
        be a transaction still to commit (the event is coming) or one rolled back (it never will).
        The gap is waited for `gap_wait` seconds, then passed over."""
        line = []
        for position, event in batch:
            if position != through + 1 and not self._gap_waited(through):
                break
            line.append((position, event))
            through = position
        return line

    def _gap_waited(self, through: int) -> bool:
        now = self.clock()
        if self._gap is None or self._gap[0] != through:
            self._gap = (through, now)
        return now - self._gap[1] >= self.webhook.gap_wait

    def _post(self, event: EventRow, source: str) -> bool:
        body = event_body(event, source)
        headers = {"Content-Type": CONTENT_TYPE,
                   SIGNATURE_HEADER: signature(self.webhook.secret, int(time.time()), body)}
        try:
            reply = self.client.post(self.webhook.url, content=body, headers=headers)
        except httpx.HTTPError as exc:  # the message may quote the URL, which may carry a token
            return self._failed(f"unreachable ({type(exc).__name__})")
        if not reply.is_success:
            return self._failed(f"HTTP {reply.status_code}")
        if self._streak:
            log.info("audit webhook: %s takes events again after %d failure(s)", self._host, self._streak)
        self._streak, self._retry_at = 0, 0.0
        self.delivered += 1
        return True

    def _failed(self, error: str) -> bool:
        self._streak += 1
        self.failed += 1
        wait = retry_after(self._streak)
        self._retry_at = self.clock() + wait
        self.cursor.failed(self.owner, error)
        log.warning("audit webhook: %s did not take an event: %s; retrying in %.0f s (%d in a row)", self._host,
                    error, wait, self._streak)
        return False

    @property
    def _host(self) -> str:
        return urlsplit(self.webhook.url).netloc.rpartition("@")[2]
