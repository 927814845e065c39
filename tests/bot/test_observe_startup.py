"""`signoff serve` starting up, as an operator reads it: one clear line when it cannot start (Slack
unreachable, the port taken), and in Socket Mode, too, timestamped lines, the probes and `/metrics`."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.slack import FakeSlack, FakeSocketMode

pytestmark = pytest.mark.slow

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) ")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_env(tmp_path: Path, slack_url: str, port: int, *, socket_mode: bool, **extra: str) -> dict[str, str]:
    (tmp_path / "script.json").write_text(json.dumps([{"final": "Nothing to do."}]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SIGNOFF_", "OTEL_"))}
    env.update(SLACK_BOT_TOKEN="xoxb-test", SLACK_SIGNING_SECRET="startup-signing-secret", SLACK_API_URL=slack_url,
               SIGNOFF_DATABASE_URL=f"sqlite:///{tmp_path / 'signoff.db'}", SIGNOFF_PORT=str(port),
               SIGNOFF_APPROVERS="*", SIGNOFF_MODEL=f"scripted:{tmp_path / 'script.json'}",
               SIGNOFF_LOG_LEVEL="INFO", HOME="/dev/null", **extra)
    if socket_mode:
        env["SLACK_APP_TOKEN"] = "xapp-test"
    return env


def serve_fails(env: dict[str, str], cwd: Path) -> tuple[int, list[str]]:
    done = subprocess.run([str(Path(sys.executable).parent / "signoff"), "serve"], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr.splitlines()


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack() as slack:
        yield slack


@pytest.mark.parametrize("socket_mode", [False, True], ids=["http", "socket-mode"])
def test_unreachable_slack_is_one_line_and_no_library_traceback(tmp_path, socket_mode):
    nowhere = f"http://127.0.0.1:{free_port()}/api/"
    code, lines = serve_fails(serve_env(tmp_path, nowhere, free_port(), socket_mode=socket_mode), tmp_path)
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith(f"error: SLACK_API_URL: cannot reach {nowhere} ("), lines


@pytest.mark.parametrize("socket_mode", [False, True], ids=["http", "socket-mode"])
def test_a_port_in_use_is_one_line_naming_the_setting(fake_slack, tmp_path, socket_mode):
    ws = FakeSocketMode()
    fake_slack.socket_url = ws.url
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = serve_fails(serve_env(tmp_path, fake_slack.url, port, socket_mode=socket_mode), tmp_path)
    ws.close()
    assert code == 1
    assert lines == [f"error: SIGNOFF_PORT: port {port} is already in use (another signoff serve, or another "
                     "program); stop it or choose another port"]
    assert fake_slack.attempts("apps.connections.open") == 0  # nothing was started before the port was refused


def test_socket_mode_serves_probes_and_metrics_and_logs_as_http_mode_does(fake_slack, tmp_path):
    ws = FakeSocketMode()
    fake_slack.socket_url = ws.url
    port = free_port()
    process = subprocess.Popen([str(Path(sys.executable).parent / "signoff"), "serve"], cwd=tmp_path,
                               env=serve_env(tmp_path, fake_slack.url, port, socket_mode=True),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "serve did not become ready"
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        ws.wait_connected()
        assert httpx.get(f"{url}/healthz").json() == {"ok": True}
        metrics = httpx.get(f"{url}/metrics")
        assert metrics.status_code == 200 and "signoff_runs_started_total 0.0" in metrics.text
        assert "signoff_approvals_pending 0.0" in metrics.text
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, err = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        ws.close()
    lines = err.decode().splitlines()
    assert any(STAMP.match(line) and "Socket Mode: connecting to Slack" in line for line in lines), lines
    assert not [line for line in lines if " WARNING " in line or " ERROR " in line or "Traceback" in line], lines
    assert not [line for line in lines if "will be unused" in line]  # Bolt's warning about the token we give it
