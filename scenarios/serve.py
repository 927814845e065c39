"""A real `signoff serve` process (HTTP mode, gunicorn) and a client that sends what Slack sends.

`signoff serve` is a gunicorn arbiter with one worker. When a failpoint makes the worker
`os._exit(137)`, the arbiter would fork a fresh worker with the same failpoint armed; like a
supervisor that gives up, `watch_for_death` SIGKILLs the whole process group the moment the
first worker is gone, and the scenario restarts serve itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from signoff.bot.slack.blocks import DENY_MODAL, DENY_REASON_BLOCK, DENY_REASON_INPUT

_triggers = count(1)
_lock = threading.Lock()


def next_trigger() -> int:
    with _lock:
        return next(_triggers)


@dataclass(frozen=True)
class Reply:
    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body) if self.body else {}

    @property
    def text(self) -> str:
        """Everything a person would read in the reply (text and block texts)."""
        try:
            data = self.json()
        except json.JSONDecodeError:
            return self.body
        return json.dumps(data, ensure_ascii=False)


class Serve:
    """One `python -m signoff.bot.cli serve` process group."""

    def __init__(self, env: dict[str, str], *, log: Path, root: Path, clock_offset: float = 0.0) -> None:
        self.env, self.log_path, self.root = env, log, root
        self.clock_offset = clock_offset
        """Seconds this process's wall clock is moved by (see `scenarios.skewed`)."""
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.workers: list[int] = []
        self.died = threading.Event()
        self.killed = False

    def start(self, timeout: float = 60.0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_", "OPENAI_"))}
        env.update(self.env, SIGNOFF_PORT=str(self.port), PYTHONPATH=str(self.root))
        with open(self.log_path, "ab") as log:
            skew = ["-m", "scenarios.skewed", str(self.clock_offset)] if self.clock_offset else []
            command = [sys.executable, *skew, "-m", "signoff.bot.cli", "serve"] if not skew else [
                sys.executable, *skew, "signoff.bot.cli", "serve"]
            self.process = subprocess.Popen(command, env=env, cwd=self.root,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"signoff serve exited with {self.process.returncode}:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"signoff serve was not healthy after {timeout:g}s:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)
        self.workers = children(self.process.pid)

    def healthy(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def alive(self) -> bool:
        """The arbiter and the worker it started with are both running."""
        if self.process is None or self.process.poll() is not None:
            return False
        return all(running(pid) for pid in self.workers)

    def watch_for_death(self) -> None:
        """In the background: once the worker dies (a failpoint fired), SIGKILL the whole group."""
        def watch() -> None:
            while not self.died.is_set():
                if not self.alive():
                    self.kill()
                    return
                time.sleep(0.01)

        threading.Thread(target=watch, daemon=True, name=f"watch-{self.port}").start()

    def kill(self) -> None:
        """SIGKILL the arbiter and its worker at once: no cleanup, no graceful shutdown."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.killed = True
        self.died.set()

    def stop(self) -> None:
        """SIGTERM (graceful), then SIGKILL if it lingers."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
            except ProcessLookupError:
                pass
        self.died.set()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    # -- what Slack sends ------------------------------------------------------------------

    def post(self, body: str | bytes, content_type: str = "application/x-www-form-urlencoded", *,
             timestamp: int | None = None, signature: str | None = None, secret: str | None = None,
             timeout: float = 30.0) -> Reply:
        raw = body.encode() if isinstance(body, str) else body
        ts = str(int(time.time()) if timestamp is None else timestamp)
        if signature is None:
            key = (secret or self.env["SLACK_SIGNING_SECRET"]).encode()
            signature = "v0=" + hmac.new(key, b"v0:" + ts.encode() + b":" + raw, hashlib.sha256).hexdigest()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", "/slack/events", body=raw, headers={
                "Content-Type": content_type, "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature})
            response = conn.getresponse()
            return Reply(response.status, response.read().decode(errors="replace"))
        finally:
            conn.close()

    def command(self, text: str, user: str, *, channel: str = "C0RUNS", response_url: str = "") -> Reply:
        return self.post(command_body(text, user, channel=channel, response_url=response_url))

    def click(self, message: dict[str, Any], action_id: str, user: str, *, value: str | None = None,
              response_url: str = "") -> Reply:
        return self.post(click_body(message, action_id, user, value=value, response_url=response_url))

    def deny(self, approval_id: str, digest: str, user: str, reason: str, channel: str = "C0RUNS") -> Reply:
        return self.post(deny_body(approval_id, digest, user, reason, channel))


def command_body(text: str, user: str, *, channel: str = "C0RUNS", response_url: str = "") -> str:
    return urlencode({
        "token": "legacy", "team_id": "T0TEST", "team_domain": "scenarios", "channel_id": channel,
        "channel_name": "runs", "user_id": user, "user_name": user.lower(), "command": "/signoff", "text": text,
        "api_app_id": "A0SIGNOFF", "response_url": response_url, "trigger_id": f"{next_trigger()}.1.trigger",
    })


def click_body(message: dict[str, Any], action_id: str, user: str, *, value: str | None = None,
               response_url: str = "") -> str:
    """A `block_actions` payload for the button `action_id` of `message`, as Slack builds it."""
    button = find_button(message, action_id) if value is None else {"value": value, "text": {
        "type": "plain_text", "text": "Approve"}}
    payload = {
        "type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": "T0TEST"},
        "api_app_id": "A0SIGNOFF", "token": "legacy", "trigger_id": f"{next_trigger()}.2.trigger",
        "team": {"id": "T0TEST", "domain": "scenarios"}, "response_url": response_url,
        "actions": [{"action_id": action_id, "block_id": "b", "type": "button", "value": button["value"],
                     "text": button["text"], "action_ts": f"{time.time():.6f}"}],
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": message["channel"],
                      "is_ephemeral": False},
        "channel": {"id": message["channel"], "name": "runs"}, "message": message,
    }
    return urlencode({"payload": json.dumps(payload)})


def home_click_body(view: dict[str, Any], action_id: str, value: str, user: str, *, view_id: str = "VH") -> str:
    """A `block_actions` payload for a button on a view: the App Home tab, or a modal with its
    `view_id` (no channel, no response_url)."""
    payload = {
        "type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": "T0TEST"},
        "api_app_id": "A0SIGNOFF", "token": "legacy", "trigger_id": f"{next_trigger()}.2.trigger",
        "team": {"id": "T0TEST", "domain": "scenarios"}, "container": {"type": "view", "view_id": view_id},
        "view": {**view, "id": view_id},
        "actions": [{"action_id": action_id, "block_id": "b", "type": "button", "value": value,
                     "text": {"type": "plain_text", "text": "Approve"}, "action_ts": f"{time.time():.6f}"}],
    }
    return urlencode({"payload": json.dumps(payload)})


def home_opened_body(user: str) -> str:
    return json.dumps({
        "token": "legacy", "team_id": "T0TEST", "api_app_id": "A0SIGNOFF", "type": "event_callback",
        "event_id": f"Ev{next_trigger()}", "event_time": int(time.time()),
        "event": {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home"},
    })


def deny_body(approval_id: str, digest: str, user: str, reason: str, channel: str = "C0RUNS") -> str:
    """The Deny modal's `view_submission`, as Slack sends it after the person typed a reason."""
    metadata = json.dumps({"approval": approval_id, "digest": digest, "channel": channel})
    payload = {
        "type": "view_submission", "team": {"id": "T0TEST"}, "user": {"id": user}, "api_app_id": "A0SIGNOFF",
        "token": "legacy", "trigger_id": f"{next_trigger()}.3.trigger", "response_urls": [],
        "view": {"id": "V1", "type": "modal", "callback_id": DENY_MODAL, "private_metadata": metadata,
                 "state": {"values": {DENY_REASON_BLOCK: {DENY_REASON_INPUT: {
                     "type": "plain_text_input", "value": reason}}}}},
    }
    return urlencode({"payload": json.dumps(payload)})


def find_button(message: dict[str, Any], action_id: str) -> dict[str, Any]:
    for block in message.get("blocks", []):
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == action_id:
                return dict(element)
    raise LookupError(f"no {action_id} button in message {message.get('ts')}")


def buttons(message: dict[str, Any]) -> list[tuple[str, str]]:
    """(action_id, value) of every button in a message."""
    return [(e.get("action_id", ""), str(e.get("value", ""))) for b in message.get("blocks", [])
            if b.get("type") == "actions" for e in b.get("elements", [])]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
