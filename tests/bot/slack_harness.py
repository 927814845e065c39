"""The `Signoff` harness: the real bot (WSGI app on 127.0.0.1:0) against FakeSlack and a real database.

Requests are signed as Slack signs them (`v0=` HMAC-SHA256 of `v0:{ts}:{body}`), in one place,
and sent over HTTP. Listeners run on Bolt's production path (ack first, work after), on an
executor the harness can wait on, so tests need no sleeps.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
from bot_fakes import Ledger, Script
from slack_sdk.signature import SignatureVerifier

from signoff.bot.settings import Settings
from signoff.bot.slack.app import AppOptions
from signoff.bot.slack.serve import Parts, Service, compose, http_server
from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.records import RunRecord
from tests.fakes.slack import FakeSlack

SIGNING_SECRET = "test-signing-secret-0123456789abcdef"


class ManualClock:
    """The store's and the listeners' clock; tests move it instead of sleeping."""

    def __init__(self) -> None:
        self._now = datetime.now(UTC).replace(microsecond=0)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def timestamp(self) -> float:
        return self.now().timestamp()

    def advance(self, **delta: float) -> None:
        with self._lock:
            self._now += timedelta(**delta)


class TrackingExecutor(ThreadPoolExecutor):
    """Bolt's listener executor, with a way to wait until every listener has finished."""

    def __init__(self) -> None:
        super().__init__(max_workers=8, thread_name_prefix="listener")
        self._futures: set[Future[Any]] = set()
        self._lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        with self._lock:
            self._futures.add(future)
        return future

    def wait_idle(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = [f for f in self._futures if not f.done()]
                self._futures = set(pending)
            if not pending:
                return
            assert time.monotonic() < deadline, "listeners did not finish"
            pending[0].result(timeout=max(deadline - time.monotonic(), 0.01))


@dataclass
class Response:
    status: int
    text: str
    elapsed: float

    def json(self) -> Any:
        return json.loads(self.text)


class Signoff:
    """Drives the bot as Slack would, and reads back what it did."""

    def __init__(self, slack: FakeSlack, database_url: str, ledger: Ledger, env: dict[str, str]) -> None:
        self.slack, self.ledger, self.clock = slack, ledger, ManualClock()
        self.script = Script()
        self.settings = Settings.from_env({
            "SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SIGNING_SECRET, "SLACK_API_URL": slack.url,
            "SIGNOFF_DATABASE_URL": database_url, "SIGNOFF_WORKERS": "4", "SIGNOFF_APPROVERS": "*", **env,
        })
        self.engine = make_engine(database_url)
        self.store = SqlStore(self.engine, clock=self.clock.now)
        self.listeners = TrackingExecutor()
        self.service: Service = compose(self.settings, environ={}, parts=Parts(
            store=self.store, tools=ledger.tools(), policies=lambda spec: self.script, scheduler=False,
            app_options=AppOptions(signing_secret=SIGNING_SECRET, listener_executor=self.listeners,
                                   clock=self.clock.timestamp),
            approvers_clock=self.clock.timestamp,
        ))
        self.server = http_server(self.service.wsgi)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True, name="signoff-http").start()
        self.http = httpx.Client(base_url=self.url, timeout=10)
        self.verifier = SignatureVerifier(SIGNING_SECRET)
        self._triggers = iter(range(1, 1_000_000))

    @property
    def runner(self):
        return self.service.runner

    def close(self) -> None:
        self.settle()
        self.http.close()
        self.server.shutdown()
        self.server.server_close()
        self.service.close()
        self.listeners.shutdown(wait=True)
        self.engine.dispose()

    # -- sending what Slack sends -------------------------------------------------------------

    def post(self, body: str, content_type: str, *, timestamp: int | None = None, signature: str | None = None,
             settle: bool = True) -> Response:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        headers = {
            "Content-Type": content_type, "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": signature or self.verifier.generate_signature(timestamp=ts, body=body),
        }
        started = time.monotonic()
        response = self.http.post("/slack/events", content=body.encode(), headers=headers)
        elapsed = time.monotonic() - started
        if settle:
            self.settle()
        return Response(response.status_code, response.text, elapsed)

    def command_body(self, text: str, user: str = "U0ASKER", channel: str = "C0RUNS") -> str:
        return urlencode({
            "token": "legacy", "team_id": "T0TEST", "team_domain": "signoff-test", "channel_id": channel,
            "channel_name": "runs", "user_id": user, "user_name": user.lower(), "command": "/signoff",
            "text": text, "api_app_id": "A0SIGNOFF", "response_url": self.slack.response_url("command"),
            "trigger_id": f"{next(self._triggers)}.1.trigger",
        })

    def command(self, text: str, user: str = "U0ASKER", channel: str = "C0RUNS", **kwargs: Any) -> Response:
        return self.post(self.command_body(text, user, channel), "application/x-www-form-urlencoded", **kwargs)

    def click_body(self, message: dict[str, Any], action_id: str, user: str) -> str:
        button = find_button(message, action_id)
        payload = {
            "type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": "T0TEST"},
            "api_app_id": "A0SIGNOFF", "token": "legacy", "trigger_id": f"{next(self._triggers)}.2.trigger",
            "team": {"id": "T0TEST", "domain": "signoff-test"},
            "response_url": self.slack.response_url("action"),
            "actions": [{"action_id": action_id, "block_id": "b", "type": "button", "value": button["value"],
                         "text": button["text"], "action_ts": f"{time.time():.6f}"}],
        }
        if "channel" in message:
            payload.update(container={"type": "message", "message_ts": message["ts"], "channel_id": message["channel"],
                                      "is_ephemeral": False},
                           channel={"id": message["channel"], "name": "runs"}, message=message)
        else:  # a view: the App Home tab, or a modal (which carries its own id)
            view_id = message.get("id", "VH")
            payload.update(container={"type": "view", "view_id": view_id}, view={**message, "id": view_id})
            del payload["response_url"]
        return urlencode({"payload": json.dumps(payload)})

    def click(self, message: dict[str, Any], action_id: str, user: str, **kwargs: Any) -> Response:
        return self.post(self.click_body(message, action_id, user), "application/x-www-form-urlencoded", **kwargs)

    def submit_deny(self, view: dict[str, Any], user: str, reason: str | None, **kwargs: Any) -> Response:
        from signoff.bot.slack.blocks import DENY_REASON_BLOCK, DENY_REASON_INPUT

        payload = {
            "type": "view_submission", "team": {"id": "T0TEST"}, "user": {"id": user}, "api_app_id": "A0SIGNOFF",
            "token": "legacy", "trigger_id": f"{next(self._triggers)}.3.trigger", "response_urls": [],
            "view": {**view, "id": "V1", "state": {"values": {DENY_REASON_BLOCK: {DENY_REASON_INPUT: {
                "type": "plain_text_input", "value": reason}}}}},
        }
        return self.post(urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded", **kwargs)

    def home_opened(self, user: str) -> Response:
        body = json.dumps({
            "token": "legacy", "team_id": "T0TEST", "api_app_id": "A0SIGNOFF", "type": "event_callback",
            "event_id": f"Ev{next(self._triggers)}", "event_time": int(time.time()),
            "event": {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home"},
        })
        return self.post(body, "application/json")

    # -- reading what happened --------------------------------------------------------------------

    def settle(self) -> None:
        """Wait until every listener and every run execution it started has finished."""
        for _ in range(50):
            self.listeners.wait_idle()
            assert self.service.workers.drain(timeout=15), "runs did not settle"
            if not self.service.workers.busy():
                self.listeners.wait_idle()
                if not self.service.workers.busy():
                    return
        raise AssertionError("never settled")

    def approval_messages(self) -> list[dict[str, Any]]:
        """Every approval request as Slack shows it now (found through the stored message refs), oldest first."""
        approvals = self.runner.store.list_approvals(limit=1000)[::-1]
        return [self.slack.message(a.message["channel"], a.message["ts"]) for a in approvals if a.message]

    def approval_message(self) -> dict[str, Any]:
        found = self.approval_messages()
        assert found, f"no approval message; Slack saw {[c.method for c in self.slack.calls]}"
        return found[-1]

    def run(self, run_id: str) -> RunRecord:
        record = self.runner.get_run(run_id)
        assert record is not None
        return record

    def only_run(self) -> RunRecord:
        runs = self.runner.store.list_runs()
        assert len(runs) == 1, runs
        return self.run(runs[0].run_id)

    def ephemerals(self, user: str | None = None) -> list[str]:
        """Texts told privately: via response_url, chat.postEphemeral, or a DM."""
        told = [r.get("text", "") for r in self.slack.responses if r.get("response_type") == "ephemeral"]
        told += [c["text"] for c in self.slack.calls_to("chat.postEphemeral") if user in (None, c.get("user"))]
        return told


def find_button(message: dict[str, Any], action_id: str) -> dict[str, Any]:
    for block in message.get("blocks", []):
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == action_id:
                return element
    raise AssertionError(f"no {action_id} button in message {message.get('text')!r}")


def buttons(message: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in message.get("blocks", []) if b.get("type") == "actions" for e in b["elements"]]
