"""A request with a bad signature is refused without its body being written to the log, even at INFO:
a body carries what people typed and the response URL that posts to their channel."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import httpx
import pytest
from serve_harness import serving

from tests.fakes.slack import FakeSlack

MARKER = "words-only-the-sender-should-see"


@pytest.mark.slow
def test_a_forged_request_is_refused_and_its_body_is_not_logged(signoff):
    body = urlencode({"command": "/signoff", "text": MARKER, "user_id": "U0ASKER", "channel_id": "C0RUNS",
                      "team_id": "T0TEST", "response_url": f"https://hooks.example.com/{MARKER}"})
    with FakeSlack(token="xoxb-good") as slack:
        env = {"SLACK_BOT_TOKEN": "xoxb-good", "SLACK_SIGNING_SECRET": "s" * 12, "SLACK_API_URL": slack.url,
               "SIGNOFF_APPROVERS": "U0LEAD", "SIGNOFF_LOG_LEVEL": "INFO"}
        with serving(signoff, env) as (url, log):
            forged = httpx.post(f"{url}/slack/events", content=body, timeout=5, headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=" + "0" * 64})

    assert forged.status_code == 401
    output = log.read_text()
    assert "INFO" in output  # INFO lines are written: the body is left out, not the level turned down
    assert MARKER not in output
    [refusal] = [line for line in output.splitlines() if "Invalid request signature" in line]
    assert refusal.endswith(", body not logged)")
