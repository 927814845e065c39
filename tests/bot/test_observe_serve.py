"""A real `signoff serve` (gunicorn, as deployed) operated as an operator would: the story of a run in
its log, text or JSON, and its metrics scraped over HTTP; a secret in a call's arguments in neither."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from slack_sdk.signature import SignatureVerifier

from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.sql import SqlStore
from tests.fakes.slack import FakeSlack

pytestmark = pytest.mark.slow

SIGNING_SECRET = "observe-signing-secret-0123456789"
PASSWORD = "hunter2-correct-horse-battery"
"""The secret the model passes to the tool: it must appear in no log line and no metric."""
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) ")

VAULT_TOOLS = '''
from pydantic import BaseModel

from signoff.tools.base import Tool


class RotateArgs(BaseModel):
    account: str
    password: str


def rotate(args, key):
    return {"rotated": args["account"]}


TOOLS = [Tool("rotate_password", rotate, side_effect=True, args_model=RotateArgs,
              description="Set a new password on an account.")]
'''
SCRIPT = [
    {"text": "I set the new password.", "tool": "rotate_password",
     "args": {"account": "ada", "password": PASSWORD},
     "usage": {"input_tokens": 1200, "output_tokens": 80, "cost_usd": 0.0021}},
    {"final": "The password of ada is rotated.", "usage": {"input_tokens": 1400, "output_tokens": 20, "cost_usd": 0.0019}},
]


class Served:
    """One `signoff serve` process against FakeSlack, and what Slack would send it."""

    def __init__(self, slack: FakeSlack, tmp: Path, **env: str) -> None:
        (tmp / "vault_tools.py").write_text(textwrap.dedent(VAULT_TOOLS))
        (tmp / "script.json").write_text(json.dumps(SCRIPT))
        self.slack, self.port = slack, _free_port()
        self.database_url = f"sqlite:///{tmp / 'signoff.db'}"
        self.url = f"http://127.0.0.1:{self.port}"
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SIGNOFF_", "OTEL_"))}
        environ.update(
            SLACK_BOT_TOKEN=slack.token, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_URL=slack.url,
            SIGNOFF_DATABASE_URL=self.database_url, SIGNOFF_PORT=str(self.port), SIGNOFF_APPROVERS="*",
            SIGNOFF_MODEL=f"scripted:{tmp / 'script.json'}", SIGNOFF_TOOLS="vault_tools:TOOLS",
            PYTHONPATH=os.pathsep.join([str(tmp), environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            # The pod's HOME is read-only: nothing may need to write there (gunicorn's control socket did).
            HOME="/dev/null", **env)
        signoff = Path(sys.executable).parent / "signoff"
        self.process = subprocess.Popen([str(signoff), "serve"], env=environ, cwd=tmp, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
        self.stderr = ""
        self._wait_live()

    def _wait_live(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.stop()
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError("signoff serve never became ready")

    def post(self, body: str) -> httpx.Response:
        ts = str(int(time.time()))
        signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=ts, body=body)
        return httpx.post(f"{self.url}/slack/events", content=body, timeout=5, headers={
            "Content-Type": "application/x-www-form-urlencoded", "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": signature})

    def command(self, text: str) -> httpx.Response:
        return self.post(urlencode({"command": "/signoff", "text": text, "user_id": "U0ASKER", "channel_id": "C0RUNS",
                                    "team_id": "T0TEST", "trigger_id": f"{time.time()}.trigger",
                                    "response_url": self.slack.response_url("command")}))

    def approval_card(self) -> dict[str, Any]:
        store = SqlStore(make_engine(self.database_url))
        try:
            posted = self.slack.wait_for(lambda: [a for a in store.list_approvals() if a.message], timeout=10)
        finally:
            store.close()
        return self.slack.message(posted[0].message["channel"], posted[0].message["ts"])

    def approve(self, card: dict[str, Any], user: str) -> httpx.Response:
        button = next(e for b in card["blocks"] if b.get("type") == "actions" for e in b["elements"]
                      if e.get("action_id") == APPROVE_ACTION)
        payload = {
            "type": "block_actions", "user": {"id": user, "team_id": "T0TEST"}, "team": {"id": "T0TEST"},
            "api_app_id": "A0SIGNOFF", "trigger_id": f"{time.time()}.click", "response_url": self.slack.response_url(),
            "container": {"type": "message", "message_ts": card["ts"], "channel_id": card["channel"]},
            "channel": {"id": card["channel"]}, "message": card,
            "actions": [{"action_id": APPROVE_ACTION, "block_id": "b", "type": "button", "value": button["value"],
                         "action_ts": f"{time.time():.6f}"}]}
        return self.post(urlencode({"payload": json.dumps(payload)}))

    def metrics(self) -> dict[str, float]:
        """Every sample on /metrics, as `name{label="value",...}` -> value (labels sorted)."""
        response = httpx.get(f"{self.url}/metrics", timeout=5)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        samples = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            _, err = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        self.stderr = err.decode()
        return self.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack(channels={"C0RUNS": ["U0ASKER", "U0LEAD"]}) as slack:
        yield slack


def run_to_the_end(served: Served) -> tuple[str, dict[str, float], dict[str, float]]:
    """A run that asks for an approval and is approved: (its id, the metrics while it waited, after)."""
    response = served.command("Rotate the password of ada")
    assert response.status_code == 200, response.text
    card = served.approval_card()
    waiting = served.metrics()
    assert served.approve(card, "U0LEAD").status_code == 200
    served.slack.wait_for(lambda: any("rotated" in m.get("text", "") for m in served.slack.messages_in("C0RUNS")),
                          timeout=10)
    store = SqlStore(make_engine(served.database_url))
    try:
        [run] = store.list_runs()
        deadline = time.monotonic() + 10
        while store.get_run(run.run_id, history=False).status != "done":
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.05)
    finally:
        store.close()
    return run.run_id, waiting, served.metrics()


def test_the_log_tells_the_run_in_timestamped_lines_and_no_secret(fake_slack, tmp_path):
    served = Served(fake_slack, tmp_path, SIGNOFF_LOG_LEVEL="INFO")
    try:
        run_id, _, _ = run_to_the_end(served)
    finally:
        stderr = served.stop()
    lines = stderr.splitlines()
    # Every record is ours, timestamped, gunicorn's included: none in gunicorn's "[date] [pid]" format
    # or without a time (as the CLI's early configuration made them).
    assert lines and STAMP.match(lines[0]), lines[0]
    assert not [line for line in lines if line.startswith("[") or re.match(r"(DEBUG|INFO|WARNING|ERROR) ", line)]
    assert any(STAMP.match(line) and " gunicorn.error: Listening at: " in line for line in lines)
    # Start-up says what it does, no more: the scheduler's and migrations' routine lines wait for DEBUG.
    assert not [line for line in lines if " apscheduler." in line or " alembic." in line]
    story = [line.split(": ", 1)[1] for line in lines if " signoff.runs: " in line]
    key = f"{run_id}:1"
    expected = [
        rf"run {run_id} started for U0ASKER \(model scripted:.*script.json; budget max_steps=8\)",
        rf"run {run_id} step 1: scripted:.* asks for rotate_password \(1200 in / 80 out tokens, \$0\.0021\)",
        rf"run {run_id}: approval apr_\S+ requested for rotate_password \(key {key}\), the default policy, "
        r"1 approval needed",
        rf"run {run_id}: approval apr_\S+ approved by U0LEAD after \d+\.\ds \(the default policy\) \(key {key}\)",
        rf"run {run_id}: rotate_password succeeded in \d+\.\d{{3}}s \(key {key}\)",
        rf"run {run_id} step 2: scripted:.* answered \(1400 in / 20 out tokens, \$0\.0019\)",
        rf"run {run_id} done: 2 model calls, 1 tool calls, 2700 tokens, \$0\.0040, \d+\.\ds running",
    ]
    assert len(story) == len(expected), "\n".join(story)
    for line, pattern in zip(story, expected, strict=True):
        assert re.fullmatch(pattern, line), f"{line!r} !~ {pattern!r}"
    # Start-up says what it does, and nothing else: no Bolt warning, no control server, no traceback.
    assert any("HTTP mode: listening on port" in line for line in lines)
    assert not [line for line in lines if "slack_bolt" in line or "ontrol" in line or "Traceback" in line]
    for secret in (PASSWORD, SIGNING_SECRET, fake_slack.token):
        assert secret not in stderr


def test_json_logs_are_one_object_a_line_with_the_ids_as_fields(fake_slack, tmp_path):
    served = Served(fake_slack, tmp_path, SIGNOFF_LOG_LEVEL="DEBUG", SIGNOFF_LOG_FORMAT="json")
    try:
        run_id, _, _ = run_to_the_end(served)
    finally:
        stderr = served.stop()
    records = [json.loads(line) for line in stderr.splitlines()]  # every line, gunicorn's included
    assert {"gunicorn.error", "signoff.runs"} <= {r["logger"] for r in records}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"]) for r in records)
    story: dict[str, dict[str, Any]] = {}
    for record in records:
        if record["logger"] == "signoff.runs":
            story.setdefault(record["event"], record)  # the first of each: step 1's decision
    assert {"run_started", "decision", "approval_requested", "approval_recorded", "execution_started",
            "tool_executed", "finished"} <= set(story)
    assert all(r["run_id"] == run_id for r in story.values())
    requested, decided = story["approval_requested"], story["approval_recorded"]
    assert requested["approval_id"] == decided["approval_id"] and requested["key"] == f"{run_id}:1"
    assert (decided["by"], decided["outcome"]) == ("U0LEAD", "approved")
    assert (story["tool_executed"]["tool"], story["tool_executed"]["outcome"]) == ("rotate_password", "ok")
    assert story["tool_executed"]["seconds"] >= 0
    assert (story["decision"]["input_tokens"], story["decision"]["cost_usd"]) == (1200, 0.0021)
    assert story["finished"]["status"] == "done"
    for secret in (PASSWORD, SIGNING_SECRET, fake_slack.token):  # at DEBUG, too
        assert secret not in stderr


def test_metrics_are_scraped_over_http_while_a_run_waits_and_after_it(fake_slack, tmp_path):
    served = Served(fake_slack, tmp_path, SIGNOFF_LOG_LEVEL="WARNING")
    try:
        _, waiting, after = run_to_the_end(served)
        page = httpx.get(f"{served.url}/metrics", timeout=5).text
    finally:
        served.stop()
    assert waiting["signoff_approvals_pending"] == 1 and after["signoff_approvals_pending"] == 0
    assert waiting["signoff_approvals_pending_past_half_ttl"] == 0
    assert after["signoff_database_up"] == 1 and after["signoff_runs_needing_reconciliation"] == 0
    model = f'model="scripted:{tmp_path / "script.json"}"'
    assert after["signoff_runs_started_total"] == 1
    assert after['signoff_runs_finished_total{status="done"}'] == 1
    assert after['signoff_runs_finished_total{status="failed"}'] == 0  # every ending is there from the start
    assert after['signoff_approvals_requested_total{rule="default",tool="rotate_password"}'] == 1
    assert after['signoff_approvals_decided_total{outcome="approved"}'] == 1
    assert after["signoff_approval_wait_seconds_count"] == 1
    assert after['signoff_tool_calls_total{outcome="ok",tool="rotate_password"}'] == 1
    assert after['signoff_tool_call_seconds_count{tool="rotate_password"}'] == 1
    assert after[f'signoff_model_calls_total{{{model},outcome="ok"}}'] == 2
    assert after[f'signoff_model_tokens_total{{kind="input",{model}}}'] == 2600
    assert after[f'signoff_model_tokens_total{{kind="output",{model}}}'] == 100
    assert after[f"signoff_model_cost_usd_total{{{model}}}"] == pytest.approx(0.004)
    assert after['signoff_http_request_seconds_count{kind="command"}'] == 1
    assert after['signoff_http_request_seconds_count{kind="interaction"}'] == 1
    assert after['signoff_http_request_seconds_count{kind="readyz"}'] >= 1
    assert PASSWORD not in page
