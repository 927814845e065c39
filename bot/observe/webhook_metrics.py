"""The audit webhook on `GET /metrics`: the deliveries this process attempted (counters; sum them over
replicas), and how far delivery lags, read from the database at each scrape (gauges; every replica
reports the same value, so aggregate those with `max`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from signoff.runtime.audit_webhook import AuditStream

log = logging.getLogger("signoff.bot.observe.webhook_metrics")


class AuditWebhookMetrics(Collector):
    """Deliveries by outcome, events waiting, the oldest one's wait, and how long deliveries have failed."""

    def __init__(self, stream: AuditStream) -> None:
        self.stream = stream

    def collect(self) -> Iterable[Metric]:
        attempts = CounterMetricFamily("signoff_audit_webhook_deliveries", "Audit events POSTed to the webhook "
                                       "by this process, by outcome (delivered: a 2xx; failed: anything else).",
                                       labels=["outcome"])
        attempts.add_metric(["delivered"], self.stream.delivered)
        attempts.add_metric(["failed"], self.stream.failed)
        yield attempts
        try:
            status = self.stream.status()
        except Exception as exc:  # a scrape must answer, whatever the database says
            log.warning("metrics: the audit webhook's cursor could not be read: %s", type(exc).__name__)
            return
        if status is None:
            return  # no replica has started delivering yet
        yield GaugeMetricFamily("signoff_audit_webhook_behind_events", "Audit events written and not yet "
                                "delivered to the webhook (all replicas).", value=status.behind)
        yield GaugeMetricFamily("signoff_audit_webhook_lag_seconds", "How long the oldest audit event not yet "
                                "delivered has waited (0: none waits).", value=status.lag_seconds)
        down = status.down_for
        yield GaugeMetricFamily("signoff_audit_webhook_failing_seconds", "How long deliveries to the webhook have "
                                "failed in a row while events wait (0: they do not).",
                                value=0.0 if down is None else down.total_seconds())
