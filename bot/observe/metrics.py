"""Prometheus metrics of one process, served on `GET /metrics`.

Counters and histograms count what this process saw (the commits it made, the Slack calls and HTTP
requests it served), so a sum over replicas is the whole. Gauges about shared state (approvals
pending, runs needing reconciliation) are read from the database when scraped, one query each, so
every replica reports the same value: aggregate those with `max`, not `sum`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from signoff.bot.observe.commits import ENDING_EVENTS, ending, model_turn, seconds
from signoff.runtime.records import RunRecord

log = logging.getLogger("signoff.bot.observe.metrics")

DECISION_OUTCOMES = ("approved", "denied", "expired", "allowed_by_rule", "allowed_by_grant", "denied_by_rule")
"""How a side effect's call was settled: by people (approved, denied, nobody in time) or by the policy."""
DEFAULT_RULE = "default"
"""The `rule` label of a call the policy's defaults asked about (no rule named it)."""

WAIT_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400)
TOOL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10)
"""Slack gives up on an answer after 3 s: a bucket ends there."""


class Metrics:
    """The metrics of one served app, in a registry of its own (a test may serve several at once)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.runs_started = Counter("signoff_runs_started", "Runs started: goal recorded, model about to be asked.",
                                    registry=registry)
        self.runs_finished = Counter(
            "signoff_runs_finished", "Runs that reached an ending, by status: done, or stopped short (a run "
            "extended, retried or reconciled afterwards ends again).", ["status"], registry=registry)
        self.approvals_requested = Counter("signoff_approvals_requested", "Approvals asked of people, by tool and "
                                           "policy rule.", ["tool", "rule"], registry=registry)
        self.approvals_decided = Counter(
            "signoff_approvals_decided", "Side-effecting calls settled: approved, denied or expired (people), "
            "allowed_by_rule, allowed_by_grant or denied_by_rule (the policy, unasked).", ["outcome"],
            registry=registry)
        self.approval_wait = Histogram("signoff_approval_wait_seconds", "From an approval's request to its decision "
                                       "or expiry.", buckets=WAIT_BUCKETS, registry=registry)
        self.tool_calls = Counter("signoff_tool_calls", "Tool executions, by tool and outcome (ok, failed, timeout, "
                                  "reconciled: settled by a person).", ["tool", "outcome"], registry=registry)
        self.tool_seconds = Histogram("signoff_tool_call_seconds", "How long tool executions took.", ["tool"],
                                      buckets=TOOL_BUCKETS, registry=registry)
        self.model_calls = Counter("signoff_model_calls", "Model calls, by model spec and outcome (ok, malformed: "
                                   "nothing usable, error: no answer).", ["model", "outcome"], registry=registry)
        self.model_tokens = Counter("signoff_model_tokens", "Tokens the model reported, by kind (input, output).",
                                    ["model", "kind"], registry=registry)
        self.model_cost = Counter("signoff_model_cost_usd", "Model cost in US dollars, as priced for budgets.",
                                  ["model"], registry=registry)
        self.budget_exhausted = Counter("signoff_budget_exhausted", "Runs stopped by a budget, by the limit reached.",
                                        ["limit"], registry=registry)
        self.slack_api_errors = Counter("signoff_slack_api_errors", "Slack Web API calls that failed, by method and "
                                        "error (Slack's error code, http_<status>, or unreachable).",
                                        ["method", "error"], registry=registry)
        self.http_seconds = Histogram("signoff_http_request_seconds", "HTTP requests served, by kind (command, "
                                      "interaction, event, refused, healthz, readyz, metrics, other), until answered.",
                                      ["kind"], buckets=HTTP_BUCKETS, registry=registry)
        for outcome in DECISION_OUTCOMES:  # present from the start, so a rate over them is never missing
            self.approvals_decided.labels(outcome)
        for status in ENDING_EVENTS.values():
            self.runs_finished.labels(status)

    # -- the observer ------------------------------------------------------------------------------

    def observe(self, run: RunRecord, events: Sequence[Mapping[str, Any]]) -> None:
        turn = model_turn(run, events)
        if turn is not None:
            self.model_calls.labels(turn.model, turn.outcome).inc()
            if turn.input_tokens:
                self.model_tokens.labels(turn.model, "input").inc(turn.input_tokens)
            if turn.output_tokens:
                self.model_tokens.labels(turn.model, "output").inc(turn.output_tokens)
            if turn.cost_usd:
                self.model_cost.labels(turn.model).inc(turn.cost_usd)
        for event in events:
            self._count(event)

    def _count(self, event: Mapping[str, Any]) -> None:
        kind = event["type"]
        status = ending(event)
        if status is not None:
            self.runs_finished.labels(status).inc()
            if status == "budget_exhausted":
                self.budget_exhausted.labels(str(event.get("budget") or "unknown")).inc()
        elif kind == "run_started":
            self.runs_started.inc()
        elif kind == "approval_requested":
            self.approvals_requested.labels(str(event.get("tool")), str(event.get("rule") or DEFAULT_RULE)).inc()
        elif kind in ("approval_recorded", "approval_expired"):
            outcome = "expired" if kind == "approval_expired" else "approved" if event.get("approved") else "denied"
            self.approvals_decided.labels(outcome).inc()
            if "waited_seconds" in event:
                self.approval_wait.observe(seconds(event["waited_seconds"]))
        elif kind in _BY_POLICY:
            self.approvals_decided.labels(_BY_POLICY[kind]).inc()
        elif kind in ("tool_executed", "tool_failed"):
            tool = str(event.get("tool"))
            self.tool_calls.labels(tool, _tool_outcome(event)).inc()
            if not event.get("reconciled"):
                self.tool_seconds.labels(tool).observe(seconds(event.get("seconds")))

    # -- what the edge reports ---------------------------------------------------------------------

    def slack_api_error(self, method: str, error: str) -> None:
        self.slack_api_errors.labels(method, error).inc()

    def http_request(self, kind: str, took: float) -> None:
        self.http_seconds.labels(kind).observe(took)

    def watch(self, shared: SharedState) -> None:
        """Report `shared`'s gauges, read at each scrape."""
        self.registry.register(SharedGauges(shared))

    def exposition(self) -> tuple[bytes, str]:
        """The page `GET /metrics` answers, and its content type (Prometheus' text format)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


_BY_POLICY = {"call_allowed_by_rule": "allowed_by_rule", "call_allowed_by_grant": "allowed_by_grant",
              "call_denied_by_rule": "denied_by_rule"}


def _tool_outcome(event: Mapping[str, Any]) -> str:
    if event.get("reconciled"):
        return "reconciled"
    if event["type"] == "tool_executed":
        return "ok"
    return "timeout" if str(event.get("error") or "").startswith("timeout:") else "failed"


# -- shared state, read at scrape time ---------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """The approvals waiting for people now."""

    count: int
    past_half_ttl: int
    """Of those, how many have waited more than half the time their rule gives them."""


class SharedState(Protocol):
    """What every replica shares, read from the database when Prometheus scrapes (`wiring.shared_state`)."""

    def pending_approvals(self) -> Pending: ...

    def runs_needing_reconciliation(self) -> int: ...

    def unreviewed_break_glass(self) -> tuple[int, int]: ...


class SharedGauges(Collector):
    """The gauges of shared state, read when Prometheus scrapes; with the database down they are left
    out (an alert on them neither fires nor clears) and `signoff_database_up` says 0."""

    def __init__(self, shared: SharedState) -> None:
        self.shared = shared

    def collect(self) -> Iterable[Metric]:
        try:
            pending = self.shared.pending_approvals()
            unreconciled = self.shared.runs_needing_reconciliation()
            unreviewed, overdue = self.shared.unreviewed_break_glass()
        except Exception as exc:  # a scrape must answer, whatever the database says
            log.warning("metrics: the database did not answer: %s: %s", type(exc).__name__,
                        str(exc).splitlines()[0] if str(exc) else "")
            yield GaugeMetricFamily("signoff_database_up", "Whether the database answered this scrape.", value=0)
            return
        yield GaugeMetricFamily("signoff_database_up", "Whether the database answered this scrape.", value=1)
        yield GaugeMetricFamily("signoff_approvals_pending", "Approvals waiting for people now (all replicas).",
                                value=pending.count)
        yield GaugeMetricFamily("signoff_approvals_pending_past_half_ttl", "Pending approvals that have waited "
                                "more than half the time their rule gives them.", value=pending.past_half_ttl)
        yield GaugeMetricFamily("signoff_runs_needing_reconciliation", "Runs stopped on a call whose outcome is "
                                "unknown, waiting for a person (all replicas).", value=unreconciled)
        yield GaugeMetricFamily("signoff_break_glass_unreviewed", "Calls approved by breaking the glass that "
                                "their rule's approvers have not reviewed yet (all replicas).", value=unreviewed)
        yield GaugeMetricFamily("signoff_break_glass_review_overdue", "Of those, how many are past the review "
                                "deadline their rule gives.", value=overdue)
