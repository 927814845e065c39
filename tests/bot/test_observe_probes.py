"""The probes, as Kubernetes asks them: liveness never asks the database, readiness asks it and
Slack, and Slack no more than once in a while however often the probe comes."""

from __future__ import annotations


def test_readiness_asks_slack_once_in_a_while_not_at_every_probe(signoff, slack):
    readiness = signoff.service.readiness
    now = [1000.0]
    readiness.clock = lambda: now[0]
    before = slack.attempts("auth.test")
    for _ in range(5):
        response = signoff.http.get("/readyz")
        assert response.status_code == 200
        assert response.json() == {"ok": True, "database": "ok", "slack": "ok"}
    assert slack.attempts("auth.test") == before + 1

    token, slack.token = slack.token, "xoxb-rotated"  # the app was reinstalled: our token is refused
    now[0] += 10
    assert signoff.http.get("/readyz").status_code == 200  # still the answer of 10 s ago
    now[0] += readiness.slack_every
    refused = signoff.http.get("/readyz")
    assert refused.status_code == 503
    assert refused.json() == {"ok": False, "database": "ok", "slack": "error (invalid_auth)"}
    assert signoff.http.get("/healthz").json() == {"ok": True}  # alive all the same: a restart would not help
    slack.token = token
    now[0] += readiness.slack_every
    assert signoff.http.get("/readyz").status_code == 200  # Slack takes the token again
    assert slack.attempts("auth.test") == before + 3


def test_the_probes_and_metrics_are_timed_by_kind(signoff):
    signoff.http.get("/healthz")
    signoff.http.get("/readyz")
    page = signoff.http.get("/metrics").text
    assert 'signoff_http_request_seconds_count{kind="healthz"} 1.0' in page
    assert 'signoff_http_request_seconds_count{kind="readyz"} 1.0' in page
