"""Serving: the WSGI app's routes, Socket Mode start-up, the scheduler, log masking, and the real servers."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from bot_fakes import Ledger, final, tool_call
from slack_harness import SIGNING_SECRET, TrackingExecutor
from slack_sdk.signature import SignatureVerifier

from signoff.bot.api.callbacks import CALLBACK_JOB
from signoff.bot.settings import Settings
from signoff.bot.slack.app import AppOptions
from signoff.bot.slack.scheduler import EXPIRE_JOB, GLASS_JOB, NUDGE_JOB, RECOVER_JOB
from signoff.bot.slack.serve import Parts, SecretFilter, compose, configure_logging, http_server
from signoff.bot.slack.wsgi import BodyLimits
from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.memory import MemoryStore
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.errors import ConfigError
from tests.fakes.slack import FakeSlack, FakeSocketMode


def test_healthz_and_routes(signoff):
    assert signoff.http.get("/healthz").json() == {"ok": True}
    assert signoff.http.get("/nothing").status_code == 404
    assert signoff.http.post("/slack/events", content=b"x=1").status_code == 401  # unsigned
    big = b"x" * (BodyLimits().max_bytes + 1)
    assert signoff.http.post("/slack/events", content=big).status_code == 413


def test_readyz_says_503_when_the_database_is_gone_and_healthz_stays_up(slack, tmp_path):
    settings = Settings.from_env({"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": "s" * 12,
                                  "SLACK_API_URL": slack.url})
    store = SqlStore(make_engine(f"sqlite:///{tmp_path}/missing/dir/signoff.db"))
    service = compose(settings, environ={}, parts=Parts(store=store, tools={}, scheduler=False))
    server = http_server(service.wsgi)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert httpx.get(f"{url}/healthz").json() == {"ok": True}  # alive: a restart would not bring it back
        response = httpx.get(f"{url}/readyz")
        assert response.status_code == 503
        assert response.json() == {"ok": False, "database": "unavailable (OperationalError)", "slack": "ok"}
    finally:
        server.shutdown()
        server.server_close()
        service.close()


def test_a_store_that_is_not_a_database_is_refused_in_one_line(slack):
    """The server's other tables (API keys, reviews, callbacks) live beside the runs: composing it
    over a store in memory is a clear error, not an assertion (gone under `python -O`)."""
    settings = Settings.from_env({"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": "s" * 12,
                                  "SLACK_API_URL": slack.url})
    with pytest.raises(ConfigError, match="^signoff serve keeps runs in a SQL database, not in a MemoryStore$"):
        compose(settings, environ={}, parts=Parts(store=MemoryStore(), tools={}, scheduler=False))


def test_socket_mode_start_up_receives_a_slash_command_and_acks_it(slack, sqlite_url):
    ws = FakeSocketMode()
    slack.socket_url = ws.url
    settings = Settings.from_env({"SLACK_BOT_TOKEN": slack.token, "SLACK_APP_TOKEN": slack.app_token,
                                  "SLACK_API_URL": slack.url, "SIGNOFF_DATABASE_URL": sqlite_url,
                                  "SIGNOFF_APPROVERS": "*"})
    assert settings.socket_mode and settings.for_serve() is settings  # no signing secret needed
    ledger = Ledger()
    policy = lambda history: final("Nothing to do.")  # noqa: E731
    listeners = TrackingExecutor()
    service = compose(settings, environ={}, parts=Parts(
        store=SqlStore(make_engine(sqlite_url)), tools=ledger.tools(), policies=lambda spec: policy,
        scheduler=False, app_options=AppOptions(signing_secret=None, listener_executor=listeners)))
    handler = service.socket_mode_handler()
    try:
        handler.connect()
        ws.wait_connected()
        ack = ws.envelope("slash_commands", {
            "command": "/signoff", "text": "Say hello", "user_id": "U0ASKER", "channel_id": "C0RUNS",
            "team_id": "T0TEST", "trigger_id": "1.2.3", "response_url": slack.response_url("sm")}, "env-1")
        listeners.wait_idle()
        assert service.workers.drain()
        runs = service.runner.store.list_runs()
        assert len(runs) == 1 and runs[0].run_id in ack["payload"]["text"]
        assert service.runner.get_run(runs[0].run_id).status == "done"
        assert slack.calls_to("apps.connections.open") == [{}]
        assert any(c["channel"] == "C0RUNS" for c in slack.calls_to("chat.postMessage"))
    finally:
        handler.close()
        ws.close()
        service.close()
        listeners.shutdown()


def test_scheduler_runs_both_jobs_and_expires_on_its_own(slack, sqlite_url):
    settings = Settings.from_env({"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": "s" * 12,
                                  "SLACK_API_URL": slack.url, "SIGNOFF_DATABASE_URL": sqlite_url,
                                  "SIGNOFF_SWEEP_INTERVAL": "1s", "SIGNOFF_APPROVAL_TTL": "1s"})
    ledger = Ledger()
    script = [tool_call("issue_refund", order_id="42", amount_usd=1.0), final("done")]
    policy = lambda history: script[sum(e["role"] == "assistant" for e in history)]  # noqa: E731
    service = compose(settings, environ={}, parts=Parts(store=SqlStore(make_engine(sqlite_url)),
                                                        tools=ledger.tools(), policies=lambda spec: policy))
    try:
        jobs = {job.id: job for job in service.scheduler.get_jobs()}
        assert set(jobs) == {EXPIRE_JOB, NUDGE_JOB, GLASS_JOB, RECOVER_JOB, CALLBACK_JOB}
        assert all(job.coalesce and job.max_instances == 1 for job in jobs.values())
        run = service.runner.start_run("Refund order 42", "U0ASKER", origin={"channel": "C0RUNS"})
        service.workers.submit(run.run_id)
        deadline = time.monotonic() + 10
        while service.runner.get_run(run.run_id).status != "expired":
            assert time.monotonic() < deadline, service.runner.get_run(run.run_id).status
            time.sleep(0.05)
        assert ledger.total == 0
    finally:
        service.close()
    assert not service.scheduler.running


def test_secret_filter_masks_tokens_and_configured_secrets():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "auth %s and %s, secret %s", (
        "xoxb-123-456-abc", "xapp-1-A0-xyz", "my-signing-secret"), None)
    SecretFilter(["my-signing-secret"]).filter(record)
    assert record.getMessage() == "auth [secret] and [secret], secret [secret]"


def test_configure_logging_installs_the_filter(caplog):
    settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-live-token", "SLACK_SIGNING_SECRET": "sign-me-please"})
    configure_logging(settings)
    root = logging.getLogger()
    assert any(isinstance(f, SecretFilter) for h in root.handlers for f in h.filters)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s", ("sign-me-please",), None)
    handler = next(h for h in root.handlers if any(isinstance(f, SecretFilter) for f in h.filters))
    assert handler.filter(record) and "sign-me-please" not in record.getMessage()
    for h in list(root.handlers):
        for f in list(h.filters):
            if isinstance(f, SecretFilter):
                h.removeFilter(f)


def test_serve_refuses_to_start_without_slack_credentials():
    from signoff.bot.slack.serve import serve

    with pytest.raises(ConfigError) as info:
        serve(Settings.from_env({}), environ={})
    assert "SLACK_BOT_TOKEN" in str(info.value) and "SLACK_SIGNING_SECRET" in str(info.value)


# -- the production servers, as processes ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, (process.stderr.read().decode()[-3000:] if process.stderr else "it exited")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("server never became healthy")


def signed_command(url: str, text: str) -> httpx.Response:
    body = urlencode({"command": "/signoff", "text": text, "user_id": "U0ASKER", "channel_id": "C0RUNS",
                      "team_id": "T0TEST", "trigger_id": f"{time.time()}.x"})
    ts = str(int(time.time()))
    signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=ts, body=body)
    return httpx.post(f"{url}/slack/events", content=body, timeout=5, headers={
        "Content-Type": "application/x-www-form-urlencoded", "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature})


@pytest.mark.slow
@pytest.mark.parametrize("how", ["signoff serve", "gunicorn factory"])
def test_http_mode_on_gunicorn_serves_signed_commands(how, slack: FakeSlack, sqlite_url, tmp_path: Path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SIGNOFF_"))}
    env.update(SLACK_BOT_TOKEN=slack.token, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_URL=slack.url,
               SIGNOFF_DATABASE_URL=sqlite_url, SIGNOFF_PORT=str(port), SIGNOFF_OUTBOX=str(tmp_path / "outbox"),
               SIGNOFF_LOG_LEVEL="WARNING", SIGNOFF_APPROVERS="*")
    venv_bin = Path(sys.executable).parent  # the console scripts sit beside this interpreter
    if how == "signoff serve":
        command = [str(venv_bin / "signoff"), "serve"]
    else:
        command = [str(venv_bin / "gunicorn"), "signoff.bot.slack.serve:wsgi_app()", "-b", f"127.0.0.1:{port}",
                   "-k", "gthread", "--threads", "4"]
    if not Path(command[0]).exists():
        pytest.skip(f"{command[0]} is not installed")
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        response = signed_command(url, "What is the refund policy?")
        assert response.status_code == 200, response.text
        assert "Started run" in response.json()["text"]
        slack.wait_for(lambda: any(c["channel"] == "C0RUNS" for c in slack.calls_to("chat.postMessage")))
        forged = httpx.post(f"{url}/slack/events", content=b"text=x", timeout=5, headers={
            "X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=" + "0" * 64})
        assert forged.status_code == 401
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, stderr = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    assert SIGNING_SECRET not in stderr.decode() and slack.token not in stderr.decode()
    assert json.loads(json.dumps(slack.calls_to("auth.test")))  # the token was checked at start-up


@pytest.mark.slow
def test_socket_mode_process_connects_and_still_answers_health_checks(slack: FakeSlack, sqlite_url, tmp_path):
    ws = FakeSocketMode()
    slack.socket_url = ws.url
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SIGNOFF_"))}
    env.update(SLACK_BOT_TOKEN=slack.token, SLACK_APP_TOKEN=slack.app_token, SLACK_API_URL=slack.url,
               SIGNOFF_DATABASE_URL=sqlite_url, SIGNOFF_PORT=str(port), SIGNOFF_OUTBOX=str(tmp_path / "outbox"),
               SIGNOFF_LOG_LEVEL="WARNING", SIGNOFF_APPROVERS="*")
    # Its output goes to a file, not a pipe nobody reads while it runs: a pipe that fills blocks
    # the process at its next log line, wherever that is (the Socket Mode thread, say).
    output = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "signoff.bot.cli", "serve"], env=env,
                               stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
        ws.wait_connected()
        assert slack.calls_to("apps.connections.open") == [{}]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        output.close()
        ws.close()
