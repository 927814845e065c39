"""Fuzzing the Slack edge as a whole: arbitrary bodies, signed and unsigned, through the real WSGI app.

`tests/bot/test_payloads.py` already fuzzes the pure parsers; this sends what an attacker (unsigned)
or a confused Slack (signed) could send through Bolt, our listeners and the runner, and checks that
every request is answered without a server error and that the pending approval stays pending.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_sdk import WebClient

from scenarios.toolset import TOOLS
from signoff.bot.settings import Settings
from signoff.bot.slack.app import AppOptions
from signoff.bot.slack.blocks import APPROVE_ACTION, DENY_ACTION, DENY_MODAL, RUN_ACTIONS
from signoff.bot.slack.serve import Parts, Service, compose
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.models.scripted import ScriptedPolicy
from tests.fakes.slack import FakeSlack

SECRET = "fuzz-signing-secret-0123456789abcdef"
NOTE = {"tool": "send_note", "args": {"to": "ada@example.com", "text": "hi"}}


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The composed bot (no scheduler) on SQLite and FakeSlack, with one run waiting for approval."""
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'signoff.db'}"
    engine = make_engine(url)
    upgrade(engine)
    store = SqlStore(engine)
    with FakeSlack() as slack:
        settings_ = Settings.from_env({"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET,
                                       "SLACK_API_URL": slack.url, "SIGNOFF_DATABASE_URL": url})
        policy = ScriptedPolicy([NOTE, {"final": "done"}])
        service: Service = compose(settings_, environ={}, parts=Parts(
            client=WebClient(token=slack.token, base_url=slack.url), store=store,
            tools={t.name: t for t in TOOLS}, policies=lambda spec: policy, scheduler=False,
            app_options=AppOptions(signing_secret=SECRET, process_before_response=True, token_verification=False)))
        run = service.runner.start_run("tell Ada", "U0ASKER", origin={"channel": "C0RUNS"})
        service.runner.execute(run.run_id)
        approval = service.runner.pending_approval(run.run_id)
        assert approval is not None
        yield {"service": service, "approval": approval, "store": store}
        service.close(wait=False)
    engine.dispose()


def call(service: Service, body: bytes, content_type: str, *, signed: bool) -> int:
    """One POST /slack/events straight into the WSGI app; returns the status code."""
    ts = str(int(time.time()))
    signature = "v0=" + (hmac.new(SECRET.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
                         if signed else "0" * 64)
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": "/slack/events", "QUERY_STRING": "", "SERVER_NAME": "test",
        "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(), "CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(len(body)),
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": ts, "HTTP_X_SLACK_SIGNATURE": signature,
    }
    statuses: list[str] = []
    b"".join(service.wsgi(environ, lambda status, headers, exc_info=None: statuses.append(status)))
    return int(statuses[0].split()[0])


leaves = st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=20)
json_values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=3), max_leaves=8)
user_ids = st.sampled_from(["U0LEAD", "U0ASKER", "W0X", "", "u0lead", "U" * 40]) | json_values
action_ids = st.sampled_from([APPROVE_ACTION, DENY_ACTION, *RUN_ACTIONS]) | st.text(max_size=20)


@st.composite
def approval_values(draw: st.DrawFn, approval_id: str) -> Any:
    digest = draw(st.text("0123456789abcdef", min_size=64, max_size=64))
    return draw(st.sampled_from([f"{approval_id}:{digest}", f"{approval_id}:", digest, approval_id])
                | json_values)


@st.composite
def bodies(draw: st.DrawFn, approval_id: str) -> tuple[bytes, str]:
    """A body of one of the shapes Slack sends, with any part of it replaced by something else."""
    action = {"action_id": draw(action_ids), "value": draw(approval_values(approval_id))}
    click = {"type": "block_actions", "user": {"id": draw(user_ids)}, "trigger_id": draw(leaves),
             "actions": draw(st.sampled_from([[action], [], "approve", [action, action], None]) | json_values),
             "container": draw(json_values)}
    submission = {"type": "view_submission", "user": {"id": draw(user_ids)}, "view": {
        "callback_id": draw(st.sampled_from([DENY_MODAL]) | st.text(max_size=10)),
        "private_metadata": draw(st.text(max_size=60) | st.just(json.dumps({"approval": approval_id,
                                                                              "digest": "ab" * 32})))}}
    payload = draw(st.sampled_from([click, submission]) | json_values)
    form = draw(st.sampled_from([
        urlencode({"payload": json.dumps(payload)}),
        urlencode({"payload": draw(st.text(max_size=40))}),
        urlencode({"command": "/signoff", "user_id": draw(user_ids), "channel_id": draw(st.text(max_size=12)),
                   "text": draw(st.sampled_from(["list", "status", "help", "cancel run-x"]) | st.text(max_size=30))}),
        draw(st.text(max_size=60)),
    ]))
    if draw(st.booleans()):
        return form.encode(), "application/x-www-form-urlencoded"
    event = {"type": draw(st.sampled_from(["event_callback", "url_verification"]) | st.text(max_size=10)),
             "event": draw(json_values), "challenge": draw(leaves)}
    raw = draw(st.sampled_from([json.dumps(event), json.dumps(draw(json_values))]) | st.text(max_size=40))
    return raw.encode(), "application/json"


@given(data=st.data(), signed=st.booleans())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_body_is_answered_without_a_server_error_and_decides_nothing(edge, data, signed):
    body, content_type = data.draw(bodies(edge["approval"].approval_id))
    try:
        status = call(edge["service"], body, content_type, signed=signed)
    except Exception as exc:  # what gunicorn turns into a 500 for the caller
        pytest.fail(f"the request raised {type(exc).__name__}: {exc} (body {body[:200]!r})")
    assert status < 500, body[:200]
    if not signed:
        assert 400 <= status < 500, f"an unsigned request got {status}"
    assert edge["store"].get_approval(edge["approval"].approval_id).status == "pending"
