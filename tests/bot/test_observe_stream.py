"""The one stream, through the real app (FakeSlack, SQLite): what the metrics count and the log tells
for each way a call is settled, across two replicas, and when an observer or Slack fails."""

from __future__ import annotations

import logging
from datetime import timedelta

from bot_fakes import Script, final, tool_call
from prometheus_client.parser import text_string_to_metric_families

from signoff.bot.observe.logs import RUNS_LOGGER
from signoff.bot.settings import Settings
from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.bot.slack.serve import Parts, compose
from signoff.bot.wiring import SqlSharedState
from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.sql import SqlStore

POLICY = """
defaults:
  approvers: ["*"]
  ttl: 30m
rules:
  - name: small-refunds
    tool: issue_refund
    when: "double(args.amount_usd) <= 50.0"
    decision: allow
  - name: huge-refunds
    tool: issue_refund
    when: "double(args.amount_usd) > 5000.0"
    decision: deny
    reason: refunds that large are made by finance
"""


def scrape(signoff) -> dict[str, float]:
    """/metrics of the harness's app, over HTTP: `name{label="value",...}` -> value, labels sorted."""
    response = signoff.http.get("/metrics")
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def story(caplog, run_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == RUNS_LOGGER and getattr(r, "run_id", None) == run_id]


def test_calls_the_policy_settles_are_counted_and_told_with_their_rule(make_signoff, tmp_path, caplog):
    (tmp_path / "policy.yaml").write_text(POLICY)
    signoff = make_signoff(SIGNOFF_POLICY=str(tmp_path / "policy.yaml"))
    signoff.script.decisions = [tool_call("issue_refund", order_id="1", amount_usd=20.0),
                                tool_call("issue_refund", order_id="2", amount_usd=9000.0), final("Done.")]
    caplog.set_level(logging.INFO, logger=RUNS_LOGGER)
    signoff.command("Refund orders 1 and 2")
    run = signoff.only_run()
    assert run.status == "done"
    metrics = scrape(signoff)
    assert metrics['signoff_approvals_decided_total{outcome="allowed_by_rule"}'] == 1
    assert metrics['signoff_approvals_decided_total{outcome="denied_by_rule"}'] == 1
    assert metrics['signoff_approvals_decided_total{outcome="approved"}'] == 0
    assert metrics["signoff_approval_wait_seconds_count"] == 0  # nobody was waited for
    told = story(caplog, run.run_id)
    assert f"run {run.run_id}: issue_refund runs without asking, allowed by policy rule small-refunds " \
           f"(key {run.run_id}:1)" in told
    assert f"run {run.run_id}: issue_refund refused by policy rule huge-refunds: refunds that large are made " \
           f"by finance (key {run.run_id}:2)" in told


def test_an_expired_approval_and_a_budget_stop_are_counted_and_told(make_signoff, caplog):
    signoff = make_signoff(SIGNOFF_MAX_STEPS="2", SIGNOFF_APPROVAL_TTL="10m")
    caplog.set_level(logging.INFO, logger=RUNS_LOGGER)
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=80.0)]
    signoff.command("Refund order 42")
    waiting = signoff.only_run()
    signoff.clock.advance(minutes=11)
    signoff.runner.expire_due()
    assert signoff.run(waiting.run_id).status == "expired"
    signoff.script.decisions = [tool_call("lookup_order", order_id=str(n)) for n in range(5)]
    signoff.command("Look up every order")
    [looping] = [r for r in signoff.runner.store.list_runs() if r.run_id != waiting.run_id]
    assert signoff.run(looping.run_id).status == "budget_exhausted"

    metrics = scrape(signoff)
    assert metrics['signoff_approvals_decided_total{outcome="expired"}'] == 1
    assert metrics["signoff_approval_wait_seconds_count"] == 1
    assert metrics["signoff_approval_wait_seconds_sum"] == 600  # the whole TTL, by the store's clock
    assert metrics['signoff_runs_finished_total{status="expired"}'] == 1
    assert metrics['signoff_runs_finished_total{status="budget_exhausted"}'] == 1
    assert metrics['signoff_budget_exhausted_total{limit="max_steps"}'] == 1
    assert metrics['signoff_tool_calls_total{outcome="ok",tool="lookup_order"}'] == 2
    expired = story(caplog, waiting.run_id)
    assert any(line.startswith(f"run {waiting.run_id}: approval apr_") and "expired after 10m 0s, not executed" in line
               for line in expired), expired
    assert expired[-1].startswith(f"run {waiting.run_id} stopped as expired: ")
    assert story(caplog, looping.run_id)[-1].startswith(f"run {looping.run_id} stopped, out of budget: "
                                                        "max_steps reached (2 model calls")


def test_counters_are_each_replicas_own_and_gauges_are_the_databases(make_signoff, sqlite_url, ledger):
    first, second = make_signoff(sqlite_url), make_signoff(sqlite_url)  # two replicas, one database
    first.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=80.0), final("Refunded.")]
    first.command("Refund order 42")
    one, other = scrape(first), scrape(second)
    assert (one["signoff_runs_started_total"], other["signoff_runs_started_total"]) == (1, 0)
    assert one["signoff_approvals_pending"] == other["signoff_approvals_pending"] == 1

    second.click(first.approval_message(), APPROVE_ACTION, user="U0LEAD")  # decided on the other replica
    first.settle()
    one, other = scrape(first), scrape(second)
    assert one['signoff_approvals_decided_total{outcome="approved"}'] == 0
    assert other['signoff_approvals_decided_total{outcome="approved"}'] == 1
    assert one["signoff_approvals_pending"] == other["signoff_approvals_pending"] == 0
    assert ledger.total == 1


def test_a_run_needing_reconciliation_shows_in_the_gauge_and_as_a_warning(signoff, caplog):
    caplog.set_level(logging.INFO, logger=RUNS_LOGGER)
    signoff.script.decisions = [tool_call("slow_refund", order_id="42", amount_usd=80.0)]
    signoff.command("Refund order 42 through the slow gateway")
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    run = signoff.only_run()
    assert run.status == "needs_reconciliation"
    assert scrape(signoff)["signoff_runs_needing_reconciliation"] == 1
    [warning] = [r for r in caplog.records if r.name == RUNS_LOGGER and r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(f"run {run.run_id} stopped as needs_reconciliation: timed out")



def test_with_info_off_a_stopped_run_is_still_logged_as_a_warning(signoff, caplog):
    """Logging at WARNING (a quiet terminal), commits without an ending build no line; an ending
    that warns is logged all the same."""
    caplog.set_level(logging.WARNING, logger=RUNS_LOGGER)
    signoff.script.decisions = [tool_call("slow_refund", order_id="42", amount_usd=80.0)]
    signoff.command("Refund order 42 through the slow gateway")
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    run = signoff.only_run()
    assert run.status == "needs_reconciliation"
    told = [r for r in caplog.records if r.name == RUNS_LOGGER]
    assert [r.levelno for r in told] == [logging.WARNING]
    assert told[0].getMessage().startswith(f"run {run.run_id} stopped as needs_reconciliation: timed out")

def test_approvals_past_half_their_ttl_are_counted_at_scrape_time(signoff):
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=80.0)]
    signoff.command("Refund order 42")  # the default TTL: 30 minutes
    now = signoff.clock.now()
    assert SqlSharedState(signoff.engine, clock=lambda: now + timedelta(minutes=14)).pending_approvals().past_half_ttl == 0
    late = SqlSharedState(signoff.engine, clock=lambda: now + timedelta(minutes=16)).pending_approvals()
    assert (late.count, late.past_half_ttl) == (1, 1)


def test_slack_api_errors_are_counted_by_method_and_error(signoff, slack):
    slack.fail("chat.postMessage", times=1)
    signoff.script.decisions = [final("Nothing to do.")]
    signoff.command("Say nothing")
    assert signoff.only_run().status == "done"  # Slack failing never fails a run
    assert scrape(signoff)['signoff_slack_api_errors_total{error="fatal_error",method="chat.postMessage"}'] == 1


def test_a_failing_observer_is_logged_and_neither_the_run_nor_the_others_notice(slack, sqlite_url, ledger, caplog):
    class BrokenExporter:
        def observe(self, run, events):
            raise RuntimeError("collector down")

    settings = Settings.from_env({"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": "s" * 12,
                                  "SLACK_API_URL": slack.url, "SIGNOFF_APPROVERS": "*"})
    script = Script(tool_call("lookup_order", order_id="42"), final("Order 42 is fine."))
    service = compose(settings, environ={}, parts=Parts(
        store=SqlStore(make_engine(sqlite_url)), tools=ledger.tools(), policies=lambda spec: script, scheduler=False,
        observers=(BrokenExporter(),)))
    try:
        run = service.runner.start_run("Check order 42", "U0ASKER", origin={"channel": "C0RUNS"})
        assert service.runner.execute(run.run_id) == "done"
        page, _ = service.observation.metrics.exposition()
    finally:
        service.close()
    assert 'signoff_runs_finished_total{status="done"} 1.0' in page.decode()
    failures = [r.getMessage() for r in caplog.records if "BrokenExporter failed" in r.getMessage()]
    assert failures and all("RuntimeError: collector down" in line for line in failures)
