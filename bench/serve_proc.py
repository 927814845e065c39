"""A real `signoff serve` process in HTTP mode against FakeSlack, and a client that signs like Slack.

Requests are signed with Slack's v0 scheme: `v0=` + HMAC-SHA256(secret, `v0:{timestamp}:{body}`).
The server can also be started as plain gunicorn over `signoff.bot.slack.serve:wsgi_app()` with other
process and thread counts, and its worker processes recorded by py-spy while a benchmark runs.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
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

    def worker_pids(self) -> list[int]:
        """The gunicorn worker processes, which serve the requests (the arbiter only supervises)."""
        return [pid for pid in process_tree(self.process.pid) if pid != self.process.pid]

    def spy(self, output: Path, *, gil: bool = False, idle: bool = False, rate: int = 100,
            nonblocking: bool = False) -> Spy:
        """Start py-spy recording the (single) worker process into `output`, in py-spy's raw format
        (collapsed stacks, one line a distinct stack, its sample count last) with each thread's
        id and name as the outermost frame. `gil`: only the thread holding the GIL; `idle`: also
        threads that are not running; `nonblocking`: read the stacks without pausing the process
        (less overhead, some torn stacks). Returns once py-spy is sampling."""
        workers = self.worker_pids()
        if len(workers) != 1:
            raise RuntimeError(f"py-spy records one worker process; this server has {len(workers)}")
        executable = py_spy()
        if executable is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        command = [executable, "record", "--pid", str(workers[0]), "--format", "raw", "--threads",
                   "--rate", str(rate), "--output", str(output)]
        command += ["--gil"] * gil + ["--idle"] * idle + ["--nonblocking"] * nonblocking
        return Spy.start(command, output)

    def dump(self, tries: int = 3) -> str:
        """`py-spy dump` of the (single) worker process: every thread's stack now, without pausing it
        (a read that tears is tried again)."""
        workers = self.worker_pids()
        executable = py_spy()
        if len(workers) != 1 or executable is None:
            raise RuntimeError("py-spy dumps one worker process, and must be installed (pip install py-spy)")
        said = ""
        for _ in range(tries):
            said = subprocess.run([executable, "dump", "--nonblocking", "--pid", str(workers[0])],
                                  capture_output=True, text=True, timeout=30).stdout
            if "\nThread " in said:
                break
        return said

    def served(self) -> dict[str, dict[str, float]]:
        """The server's own count of the requests it answered, by kind (`command`, `interaction`, ...):
        `signoff_http_request_seconds` from `/metrics`, as {kind: {"count", "sum", "le=<bound>": count}}.
        The time runs from the WSGI app being called to its answer, so it leaves out waiting for
        one of gunicorn's threads, and the client's side. With several processes, one answers."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", "/metrics")
            page = conn.getresponse().read().decode()
        finally:
            conn.close()
        found: dict[str, dict[str, float]] = {}
        for match in re.finditer(r'^signoff_http_request_seconds_(bucket|sum|count)\{kind="([^"]+)"(?:,le="([^"]+)")?\} '
                                 r'(\S+)$', page, re.MULTILINE):
            part, kind, bound, value = match.groups()
            found.setdefault(kind, {})[f"le={bound}" if part == "bucket" else part] = float(value)
        return found

    def cpu_seconds(self) -> tuple[float, float]:
        """(user, system) CPU seconds the server's processes have used so far."""
        times = [cpu_seconds(pid) for pid in process_tree(self.process.pid)]
        return sum(user for user, _ in times), sum(system for _, system in times)

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
        end_process(self.process, signal.SIGTERM, 30)
        self.log.close()
        self.slack.stop()
        self.workdir.cleanup()


@dataclass(frozen=True)
class Gunicorn:
    """gunicorn started directly over `wsgi_app()`, with other counts than `signoff serve`'s one
    process of 32 threads. Each process has its own run workers and scheduler."""

    processes: int = 1
    threads: int = 32

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-m", "gunicorn", "--workers", str(self.processes), "--threads", str(self.threads),
                "--worker-class", "gthread", "--bind", f"127.0.0.1:{port}", "--timeout", "30",
                "--no-control-socket", "--log-level", "warning", "signoff.bot.slack.serve:wsgi_app()"]


def start(database_url: str, *, sweep_interval: str = "1s", workers: int = 4,
          gunicorn: Gunicorn | None = None) -> Server:
    """Start FakeSlack and `signoff serve` (HTTP mode) on a free port; return once /healthz answers.

    `workers`: SIGNOFF_WORKERS, the run workers (per process); `gunicorn`: run gunicorn itself
    with those counts instead of `signoff serve`."""
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
    command = gunicorn.command(port) if gunicorn else [sys.executable, "-m", "signoff.bot.cli", "serve"]
    process = subprocess.Popen(command, env=env, cwd=workdir.name, stdout=log, stderr=subprocess.STDOUT)
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


def py_spy() -> str | None:
    """The py-spy executable: beside this interpreter (a virtualenv's bin/) or on PATH."""
    return shutil.which("py-spy", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


@dataclass
class Spy:
    """A running `py-spy record`; `stop()` ends it (as Ctrl-C would) and waits for its file."""

    process: subprocess.Popen[bytes]
    output: Path
    log: IO[bytes]
    started: float = 0.0
    """`time.perf_counter()` when py-spy said it was sampling."""
    seconds: float = 0.0
    """How long it sampled: from then until it was told to stop."""
    errors: int = 0
    """Samples py-spy could not take (more often without pausing the process: a stack changed as it was read)."""

    @classmethod
    def start(cls, command: list[str], output: Path, timeout: float = 20.0) -> Spy:
        log = open(output.with_suffix(".log"), "wb")  # noqa: SIM115  # closed by stop
        spy = cls(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), output, log)
        # py-spy says it is sampling once it has found the interpreter in the process.
        deadline = time.monotonic() + timeout
        while b"Sampling process" not in output.with_suffix(".log").read_bytes():
            if spy.process.poll() is not None or time.monotonic() > deadline:
                spy.stop()
                raise RuntimeError(f"py-spy did not start: {output.with_suffix('.log').read_text(errors='replace')}")
            time.sleep(0.02)
        spy.started = time.perf_counter()
        return spy

    def stop(self) -> Path:
        if self.process.poll() is None:
            self.seconds = time.perf_counter() - self.started
        end_process(self.process, signal.SIGINT, 60)  # py-spy writes its profile on SIGINT
        self.log.close()
        said = re.search(r"Samples: \d+ Errors: (\d+)", self.output.with_suffix(".log").read_text(errors="replace"))
        self.errors = int(said[1]) if said else 0
        return self.output


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


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process; zeros once it has gone."""
    try:
        # The command name (field 2) is in parentheses and may hold spaces: count fields after it.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick  # utime, stime


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def end_process(process: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
    """Ask a process to end with `sig`, and kill it if it has not within `timeout` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
