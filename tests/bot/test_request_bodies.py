"""Request bodies before Bolt, over real sockets: slow senders get a deadline and few slots, so a real
signed request is still answered; bodies Python cannot read are 400s, not tracebacks.

The same WSGI app runs under the wsgiref server the tests use and under gunicorn (`signoff serve`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from slack_harness import SIGNING_SECRET, Signoff
from slack_sdk.signature import SignatureVerifier

from signoff.bot.slack.wsgi import BodyLimits, BodyReader, http_server, make_wsgi

FORM = "application/x-www-form-urlencoded"


def slow_sender(port: int, declared: int = 500_000) -> socket.socket:
    """A connection that declares a body of `declared` bytes and sends one of them."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    sock.sendall((f"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: {FORM}\r\n"
                  f"Content-Length: {declared}\r\n\r\nx").encode())
    return sock


def status_of(sock: socket.socket) -> int:
    """The status code the server answered on `sock` (0 if it closed without answering)."""
    try:
        head = sock.recv(200)
    except OSError:
        return 0
    finally:
        sock.close()
    return int(head.split()[1]) if head.startswith(b"HTTP/") else 0


def answers(socks: list[socket.socket]) -> list[int]:
    statuses: list[int] = [0] * len(socks)

    def read(i: int) -> None:
        statuses[i] = status_of(socks[i])

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(socks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    return statuses


def signed_help(url: str) -> tuple[int, str, float]:
    body = urlencode({"command": "/signoff", "text": "help", "user_id": "U0ASKER", "channel_id": "C0RUNS",
                      "team_id": "T0TEST", "trigger_id": f"{time.time()}.help"})
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=stamp, body=body)
    started = time.monotonic()
    response = httpx.post(f"{url}/slack/events", content=body, timeout=15, headers={
        "Content-Type": FORM, "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature})
    return response.status_code, response.text, time.monotonic() - started


@pytest.fixture
def tight(signoff: Signoff) -> Iterator[str]:
    """The harness's bot behind a second wsgiref server with short body limits; its URL."""
    limits = BodyLimits(deadline_s=1.5, late_after_s=0.3, late_slots=3)
    server = http_server(make_wsgi(signoff.service.app, signoff.service.healthy, bodies=BodyReader(limits)))
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_a_body_that_stops_arriving_is_answered_408_at_the_deadline(tight):
    sock = slow_sender(port_of(tight))
    started = time.monotonic()
    assert status_of(sock) == 408
    assert 1.4 < time.monotonic() - started < 3


def test_a_body_trickled_a_byte_at_a_time_still_meets_the_deadline(tight):
    sock = slow_sender(port_of(tight), declared=1000)
    started = time.monotonic()
    status: list[int] = []
    reader = threading.Thread(target=lambda: status.append(status_of(sock)))
    reader.start()
    while reader.is_alive() and time.monotonic() - started < 5:
        try:
            sock.send(b"x")  # every recv returns in time; only the deadline for the whole body stops it
        except OSError:
            break
        time.sleep(0.1)
    reader.join(5)
    assert status == [408] and time.monotonic() - started < 3


def test_late_bodies_beyond_the_slots_are_turned_away_and_real_requests_are_answered(tight):
    socks = [slow_sender(port_of(tight)) for _ in range(10)]
    time.sleep(0.1)
    status, text, elapsed = signed_help(tight)
    assert status == 200 and "Signoff commands" in text and elapsed < 1
    statuses = answers(socks)
    assert sorted(statuses) == [408] * 3 + [503] * 7, statuses  # three slots waited for; the rest at once


def test_a_declared_length_that_is_not_a_number_is_400(signoff):
    for length in ("-1", "12abc", "9" * 5000):
        sock = socket.create_connection(("127.0.0.1", port_of(signoff.url)), timeout=5)
        sock.sendall(f"POST /slack/events HTTP/1.0\r\nContent-Length: {length}\r\n\r\n".encode())
        assert status_of(sock) == 400, length


def test_a_5000_digit_integer_is_400_not_a_server_error(signoff):
    huge = "7" * 5000
    as_json = signoff.post('{"type": "event_callback", "event_id": ' + huge + "}", "application/json")
    payload = '{"type": "block_actions", "actions": [{"action_id": "signoff.approve", "value": ' + huge + "}]}"
    as_form = signoff.post(urlencode({"payload": payload}), FORM)
    unsigned = signoff.post('{"n": ' + huge + "}", "application/json", signature="v0=" + "0" * 64)
    assert (as_json.status, as_form.status, unsigned.status) == (400, 400, 400)
    assert "Traceback" not in as_json.text + as_form.text and "not a JSON object" in as_json.text


def test_a_timestamp_that_is_not_a_number_is_401_not_a_server_error(signoff):
    body = signoff.command_body("help")
    for stamp in ("abc", "9" * 5000):
        response = signoff.http.post("/slack/events", content=body, headers={
            "Content-Type": FORM, "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": "v0=" + "0" * 64})
        assert response.status_code == 401, stamp


# -- under gunicorn, as deployed --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_on_gunicorn_more_slow_senders_than_threads_cannot_stop_slash_commands(slack, sqlite_url, tmp_path: Path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SIGNOFF_"))}
    env.update(SLACK_BOT_TOKEN=slack.token, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_URL=slack.url,
               SIGNOFF_DATABASE_URL=sqlite_url, SIGNOFF_PORT=str(port), SIGNOFF_OUTBOX=str(tmp_path / "outbox"),
               SIGNOFF_LOG_LEVEL="WARNING", SIGNOFF_APPROVERS="*")
    process = subprocess.Popen([sys.executable, "-m", "signoff.bot.cli", "serve"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read().decode()[-3000:] if process.stderr else ""
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "signoff serve never became healthy"
            time.sleep(0.1)
        socks = [slow_sender(port) for _ in range(40)]  # gunicorn runs 32 threads
        time.sleep(0.2)
        status, text, elapsed = signed_help(url)
        assert status == 200 and "Signoff commands" in json.dumps(json.loads(text))
        assert elapsed < 2, elapsed
        statuses = answers(socks)
        assert set(statuses) <= {408, 503} and statuses.count(408) <= BodyLimits().late_slots, statuses
        status, _, elapsed = signed_help(url)
        assert status == 200 and elapsed < 1
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
