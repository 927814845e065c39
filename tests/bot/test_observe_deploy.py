"""The deploy files use what Signoff serves: the probes' paths, the scrape annotations, and alert
rules over metrics that exist, aggregated as each kind must be (shared gauges by max)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from signoff.bot.observe.metrics import Metrics, SharedGauges
from signoff.bot.slack.wsgi import HEALTH_PATH, METRICS_PATH, READY_PATH

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SHARED = {"signoff_approvals_pending", "signoff_approvals_pending_past_half_ttl", "signoff_runs_needing_reconciliation",
          "signoff_database_up", "signoff_break_glass_unreviewed", "signoff_break_glass_review_overdue"}


class _Answers:
    """Shared state as a database with nothing waiting would give it."""

    def pending_approvals(self):
        from signoff.bot.observe.metrics import Pending

        return Pending(0, 0)

    def runs_needing_reconciliation(self):
        return 0

    def unreviewed_break_glass(self):
        return 0, 0


def served_metric_names() -> set[str]:
    """Every series name /metrics can show, whether or not anything was counted yet."""
    metrics = Metrics()
    metrics.registry.register(SharedGauges(_Answers()))  # type: ignore[arg-type]
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    return {family.name + suffix for family in metrics.registry.collect() for suffix in suffixes[family.type]}


def deployment() -> dict:
    return yaml.safe_load((DEPLOY / "k8s" / "deployment.yaml").read_text())


def test_the_deployment_probes_liveness_and_readiness_apart_and_is_scraped():
    template = deployment()["spec"]["template"]
    [container] = template["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == HEALTH_PATH
    assert container["readinessProbe"]["httpGet"]["path"] == READY_PATH
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == METRICS_PATH
    assert int(annotations["prometheus.io/port"]) == container["ports"][0]["containerPort"]


def test_every_alert_is_about_metrics_signoff_serves_and_says_what_to_do():
    rules = yaml.safe_load((DEPLOY / "prometheus-alerts.yaml").read_text())["groups"][0]["rules"]
    served = served_metric_names()
    assert {"signoff_approvals_pending_past_half_ttl", "signoff_slack_api_errors_total",
            "signoff_http_request_seconds_bucket"} <= served
    named: set[str] = set()
    for rule in rules:
        assert rule["alert"].startswith("Signoff") and rule["labels"]["severity"] in ("page", "warning")
        assert rule["annotations"]["summary"]
        used = set(re.findall(r"\bsignoff_[a-z_]+", rule["expr"]))
        assert used and used <= served, f"{rule['alert']} uses {used - served}"
        for name in used & SHARED:  # every replica reports the same value: a sum would multiply it
            assert f"max({name})" in rule["expr"], rule["alert"]
        named |= used
    # The alerts the operator asked for: approvals past half their TTL, reconciliation, Slack errors.
    assert {"signoff_approvals_pending_past_half_ttl", "signoff_runs_needing_reconciliation",
            "signoff_slack_api_errors_total"} <= named
