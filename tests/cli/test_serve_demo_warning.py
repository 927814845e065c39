"""`signoff serve` says it serves the scripted demo model only when nobody chose a model, and only
once start-up has passed its checks: never before the error that stops it."""

from __future__ import annotations

import re

import pytest
from serve_harness import serving

from tests.fakes.slack import FakeSlack

WARNING = "serving the scripted demo model, not a real one with the demo tools: set SIGNOFF_MODEL"


def slack_env(slack: FakeSlack, token: str) -> dict[str, str]:
    return {"SLACK_BOT_TOKEN": token, "SLACK_SIGNING_SECRET": "s" * 12, "SLACK_API_URL": slack.url,
            "SIGNOFF_APPROVERS": "U0LEAD"}


def served(signoff, env: dict[str, str]) -> str:
    """What `signoff serve` printed by the time it answered its health check, then was stopped."""
    with serving(signoff, env) as (_, log):
        pass
    return log.read_text()


@pytest.mark.slow
def test_serve_with_no_model_chosen_warns_that_it_serves_the_demo_model(signoff):
    with FakeSlack(token="xoxb-good") as slack:
        output = served(signoff, slack_env(slack, "xoxb-good"))

    [warning] = [line for line in output.splitlines() if "demo model" in line]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING ", warning), warning  # timestamped
    assert WARNING in warning


@pytest.mark.slow
def test_serve_with_the_demo_model_chosen_on_purpose_does_not_warn(signoff):
    with FakeSlack(token="xoxb-good") as slack:
        output = served(signoff, {**slack_env(slack, "xoxb-good"), "SIGNOFF_MODEL": "scripted:demo"})

    assert "demo model" not in output


def test_a_serve_that_cannot_start_says_only_why(signoff):
    with FakeSlack(token="xoxb-good") as slack:
        refused = signoff("serve", env=slack_env(slack, "xoxb-revoked"))

    assert refused.code == 1
    assert "demo model" not in refused.err
    assert refused.err.strip() == "error: SLACK_BOT_TOKEN: Slack refused it (invalid_auth)"
