"""A real `signoff serve` process in HTTP mode against FakeSlack, and a client that signs like Slack.

Requests are signed with Slack's v0 scheme: `v0=` + HMAC-SHA256(secret, `v0:{timestamp}:{body}`).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode

from bench import report

SECRET = "bench-signing-secret-0123456789abcdef"
CHANNEL = "CBENCHRUNS"
TEAM = "T0TEST"
"""The workspace FakeSlack's `auth.test` names: Signoff drops requests from any other."""


def available() -> bool:
    """`signoff serve` and the fake Slack API are both importable here."""
    if str(report.ROOT) not in sys.path:
        sys.path.insert(0, str(report.ROOT))
    try:
        import signoff.bot.slack.serve  # noqa: F401
        import tests.fakes.slack  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    slack: Any
    workdir: tempfile.TemporaryDirectory[str]
    log: IO[bytes]
    """The server's output file, which this process opened and closes in `stop`."""
    triggers: Any = field(default_factory=lambda: iter(range(1, 10**9)))

    def post(self, body: str, content_type: str) -> tuple[int, float, str]:
        """Send one signed request as Slack would; (status, seconds to the response, body)."""
        timestamp = str(int(time.time()))
        signature = "v0=" + hmac.new(SECRET.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            start = time.perf_counter()
            conn.request("POST", "/slack/events", body=body.encode(), headers={
                "Content-Type": content_type, "X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": signature})
            response = conn.getresponse()
            text = response.read().decode()
            elapsed = time.perf_counter() - start
        finally:
            conn.close()
        return response.status, elapsed, text

    def command(self, text: str, user: str) -> tuple[int, float, str]:
        body = urlencode({
            "token": "legacy", "team_id": TEAM, "team_domain": "bench", "channel_id": CHANNEL,
            "channel_name": "runs", "user_id": user, "user_name": user.lower(), "command": "/signoff",
            "text": text, "api_app_id": "A0SIGNOFF", "response_url": self.slack.response_url("command"),
            "trigger_id": f"{next(self.triggers)}.1.trigger",
        })
        return self.post(body, "application/x-www-form-urlencoded")

    def click(self, message: dict[str, Any], action_id: str, user: str) -> tuple[int, float, str]:
        button = next(e for b in message.get("blocks", []) if b.get("type") == "actions"
                      for e in b["elements"] if e.get("action_id") == action_id)
        payload = {
            "type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": TEAM},
            "api_app_id": "A0SIGNOFF", "token": "legacy", "trigger_id": f"{next(self.triggers)}.2.trigger",
            "team": {"id": TEAM, "domain": "bench"}, "response_url": self.slack.response_url("action"),
            "actions": [{"action_id": action_id, "block_id": "b", "type": "button", "value": button["value"],
                         "text": button["text"], "action_ts": f"{time.time():.6f}"}],
            "container": {"type": "message", "message_ts": message["ts"], "channel_id": message["channel"],
                          "is_ephemeral": False},
            "channel": {"id": message["channel"], "name": "runs"}, "message": message,
        }
        return self.post(urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded")

    def home_opened(self, user: str) -> tuple[int, float, str]:
        body = json.dumps({
            "token": "legacy", "team_id": TEAM, "api_app_id": "A0SIGNOFF", "type": "event_callback",
            "event_id": f"Ev{next(self.triggers)}", "event_time": int(time.time()),
            "event": {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home"},
        })
        return self.post(body, "application/json")

    def rss(self) -> dict[str, Any]:
        """Resident memory of the server's process tree (gunicorn's arbiter and its worker)."""
        pids = process_tree(self.process.pid)
        sizes = {pid: rss_kib(pid) for pid in pids}
        return {"rss_mib": round(sum(sizes.values()) / 1024, 1),
                "processes": {str(pid): round(kib / 1024, 1) for pid, kib in sizes.items()}}

    def settle_and_measure(self, wait: float, user: str = "UAPPROVER1") -> dict[str, Any]:
        """Let the scheduler sweep for `wait` seconds, open `/signoff list` and App Home, then read RSS."""
        time.sleep(wait)
        for _ in range(3):
            assert self.command("list", user)[0] == 200
            assert self.home_opened(user)[0] == 200
        time.sleep(wait)
        return self.rss()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        self.slack.stop()
        self.workdir.cleanup()


def start(database_url: str, *, sweep_interval: str = "1s", workers: int = 4) -> Server:
    """Start FakeSlack and `signoff serve` (HTTP mode) on a free port; return once /healthz answers."""
    from tests.fakes.slack import FakeSlack

    slack = FakeSlack().start()
    workdir = tempfile.TemporaryDirectory(prefix="signoff-serve-")
    script = Path(workdir.name) / "script.json"
    from bench.workload import SERVE_SCRIPT

    script.write_text(json.dumps(SERVE_SCRIPT), encoding="utf-8")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_"))}
    env.update({
        "PYTHONPATH": str(report.ROOT), "SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.url, "SIGNOFF_DATABASE_URL": database_url, "SIGNOFF_MODEL": f"scripted:{script}",
        "SIGNOFF_TOOLS": "bench.workload:SERVE_TOOLS", "SIGNOFF_PORT": str(port),
        "SIGNOFF_SWEEP_INTERVAL": sweep_interval, "SIGNOFF_WORKERS": str(workers), "SIGNOFF_LOG_LEVEL": "WARNING",
        "SIGNOFF_OUTBOX": str(Path(workdir.name) / "outbox"), "SIGNOFF_APPROVERS": "U0APPROVER,UAPPROVER1",
    })
    log = open(Path(workdir.name) / "serve.log", "wb")  # noqa: SIM115  # closed by Server.stop
    process = subprocess.Popen([sys.executable, "-m", "signoff.bot.cli", "serve"], env=env, cwd=workdir.name,
                               stdout=log, stderr=subprocess.STDOUT)
    server = Server(process, port, slack, workdir, log)
    try:
        wait_healthy(server)
    except BaseException:
        server.stop()
        raise
    return server


def wait_healthy(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            log = (Path(server.workdir.name) / "serve.log").read_text(errors="replace")
            raise RuntimeError(f"signoff serve exited with {server.process.returncode}:\n{log[-3000:]}")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.1)
    raise RuntimeError("signoff serve did not become healthy in time")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        todo += [int(c) for c in children]
    return found


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
