"""`signoff serve` streams the audit events to `SIGNOFF_AUDIT_WEBHOOK_URL`: a scheduler job a
second, which delivers only on the replica holding the cursor's lease and waits out its backoff."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from urllib.parse import urlsplit

from apscheduler.schedulers.background import BackgroundScheduler

from signoff.bot.observe.metrics import Metrics
from signoff.bot.observe.webhook_metrics import AuditWebhookMetrics
from signoff.bot.settings import Settings
from signoff.bot.slack.scheduler import JobFailures
from signoff.bot.wiring import audit_webhook
from signoff.runtime.audit_webhook import AuditStream
from signoff.runtime.ports import Store
from signoff.runtime.runner_config import default_worker_id

log = logging.getLogger("signoff.bot.slack.audit_webhook")

AUDIT_WEBHOOK_JOB = "deliver-audit-events"
ROUND_SECONDS = 1.0
"""How often a round starts: an event reaches the receiver about this long after it is written."""


def deliver_audit_events(stream: AuditStream, failures: JobFailures) -> int:
    """One round; a database error is logged, and the next round tries again."""
    try:
        delivered = stream.deliver_due()
    except Exception as exc:  # one bad round must not stop the stream
        failures.failed(exc)
        return 0
    failures.succeeded()
    return delivered


def stream_audit_events(settings: Settings, store: Store, metrics: Metrics,
                        scheduler: BackgroundScheduler | None) -> AuditStream | None:
    """Deliver the audit events from `store` with `scheduler` (None: nothing delivers, but the
    metrics still say how far behind delivery is); None without a webhook URL."""
    stream = audit_webhook(settings, store, owner=default_worker_id())
    if stream is None:
        return None
    metrics.registry.register(AuditWebhookMetrics(stream))
    if scheduler is not None:
        scheduler.add_job(deliver_audit_events, "interval", seconds=ROUND_SECONDS, id=AUDIT_WEBHOOK_JOB,
                          args=(stream, JobFailures(AUDIT_WEBHOOK_JOB)), next_run_time=datetime.now(UTC))
        log.info("audit webhook: delivering audit events to %s",
                 urlsplit(settings.audit_webhook_url or "").netloc.rpartition("@")[2])
    return stream
