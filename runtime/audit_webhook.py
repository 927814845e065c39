"""Audit events streamed to a webhook: the CloudEvent an event is sent as, its signature, the
delivery's backoff, and the ports the deliverer and its readers need.

The event inside is the export's (`audit_export.exported_event`), chain hash and all, so a copy
kept by the receiver checks like an export. Pure: no I/O, no HTTP, no SQL.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from signoff.runtime.audit import EventRow, stamp
from signoff.runtime.audit_export import exported_event
from signoff.runtime.digests import canonical_json

SPEC_VERSION = "1.0"
TYPE_PREFIX = "dev.signoff."
"""An event's CloudEvents `type` is this and the audit event's own type: `dev.signoff.run_created`."""
CONTENT_TYPE = "application/cloudevents+json"
"""CloudEvents' structured mode: the whole event is the body, its attributes in it."""
SIGNATURE_HEADER = "Signoff-Signature"
FIRST_RETRY, LAST_RETRY = 1.0, 60.0
"""Seconds before the first retry of a delivery that failed, and the most it ever waits."""
DOWN_FOR_LONG = timedelta(minutes=15)
"""A receiver that has taken no event for this long while events wait is down: `signoff check` fails."""


def event_id(event: EventRow) -> str:
    """The CloudEvent's `id`: `<run id>:<seq>`, the same on every delivery of the event (dedupe by it)."""
    return f"{event.run_id}:{event.seq}"


def cloud_event(event: EventRow, source: str) -> dict[str, Any]:
    """The CloudEvents 1.0 event an audit event is delivered as; `data` is the event as exported."""
    return {"specversion": SPEC_VERSION, "id": event_id(event), "source": source,
            "type": TYPE_PREFIX + event.type, "time": stamp(event.at), "datacontenttype": "application/json",
            "data": exported_event(event)}


def event_body(event: EventRow, source: str) -> bytes:
    """The request body: the CloudEvent as canonical JSON (the signature covers these bytes)."""
    return canonical_json(cloud_event(event, source)).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The `Signoff-Signature` header: `t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">`."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def retry_after(failures: int) -> float:
    """Seconds to wait after `failures` failed deliveries in a row: 1, 2, 4, ... up to 60."""
    doublings: int = min(max(failures - 1, 0), 16)
    return min(LAST_RETRY, FIRST_RETRY * float(2**doublings))


def target_of(url: str) -> str:
    """What the cursor records of the URL it delivers to: its hash (a URL may carry a token)."""
    return hashlib.sha256(url.encode()).hexdigest()


@dataclass(frozen=True)
class DeliveryStatus:
    """Where delivery stands, as the database records it (every replica reads the same)."""

    target: str
    """`target_of` the URL the cursor was started for."""
    through: int
    """Every event numbered up to this was delivered, or was written before the webhook was configured."""
    behind: int
    """Events written after the cursor: not delivered yet."""
    oldest_behind: datetime | None
    """When the oldest of them was written (None: none waits)."""
    failing_since: datetime | None
    """The first of the failed deliveries in a row (None: the last one succeeded)."""
    failures: int
    last_error: str | None
    now: datetime
    """The database's time when this was read."""

    @property
    def lag_seconds(self) -> float:
        """How long the oldest event not yet delivered has waited (0: none waits)."""
        return 0.0 if self.oldest_behind is None else max(0.0, (self.now - self.oldest_behind).total_seconds())

    @property
    def down_for(self) -> timedelta | None:
        """How long deliveries have failed while events wait (None: the receiver is not failing)."""
        if self.failing_since is None or not self.behind:
            return None
        return self.now - self.failing_since


class AuditCursor(Protocol):
    """The delivery's durable state: where it stands in the log, and which replica delivers (a lease)."""

    def start(self, target: str) -> str:
        """Make the cursor for `target` (at the log's current end, the first time or after the URL
        changed); return the CloudEvents `source` of this database."""
        ...

    def claim(self, owner: str, lease: timedelta) -> int | None:
        """Take or renew the lease; the cursor (`through`), or None while another replica holds it."""
        ...

    def after(self, through: int, limit: int) -> list[tuple[int, EventRow]]:
        """Up to `limit` events numbered after `through`, in the order they were numbered."""
        ...

    def advance(self, owner: str, through: int, to: int) -> bool:
        """Move the cursor from `through` to `to` while `owner` holds a live lease; False if it does not."""
        ...

    def failed(self, owner: str, error: str) -> None:
        """Record a failed delivery (for `signoff check` and the metrics)."""
        ...

    def status(self) -> DeliveryStatus | None:
        """Where delivery stands; None before the first `start`."""
        ...


class AuditStream(Protocol):
    """What serve runs and watches: a delivery round, its status, and what this process attempted."""

    delivered: int
    failed: int

    def deliver_due(self) -> int:
        """Deliver what is due (nothing while another replica holds the lease or a retry waits)."""
        ...

    def status(self) -> DeliveryStatus | None: ...
