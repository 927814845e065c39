"""The Web API client keeps its connections to Slack open between calls: calls still answer, fail
and are counted as they were, and a connection Slack closed while it sat idle is not used again."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from signoff.bot.slack.web_client import CountedWebClient
from tests.fakes.slack import FakeSlack


class _Counting(ThreadingHTTPServer):
    """A Slack-shaped server that counts the connections it accepted and the requests it took; with
    `close_after_each`, it closes each one after answering, without saying so (as a server's idle
    timeout would); with `redirect`, it answers every request with a 302 elsewhere."""

    daemon_threads = True

    def __init__(self, close_after_each: bool = False, redirect: bool = False) -> None:
        self.connections, self.close_after_each, self.posts = 0, close_after_each, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                outer.connections += 1

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts += 1
                data = json.dumps({"ok": True, "channel": "C1", "ts": "1.0"}).encode()
                self.send_response(302 if redirect else 200)
                if redirect:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = outer.close_after_each

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/api/"


def test_calls_go_over_one_kept_connection() -> None:
    server = _Counting()
    try:
        client = CountedWebClient(token="xoxb-test", base_url=server.url)
        for i in range(5):
            assert client.chat_postMessage(channel="C1", text=f"message {i}")["ok"]
        assert server.connections == 1
    finally:
        server.shutdown()
        server.server_close()


def test_a_connection_slack_closed_while_idle_is_not_used_again() -> None:
    server = _Counting(close_after_each=True)
    try:
        client = CountedWebClient(token="xoxb-test", base_url=server.url)
        for i in range(3):
            assert client.chat_postMessage(channel="C1", text=f"message {i}")["ok"]
        assert server.connections == 3
    finally:
        server.shutdown()
        server.server_close()


def test_a_post_answered_with_a_redirect_is_not_sent_again() -> None:
    """Slack's API redirects nothing; a server that does has taken the post already: it fails once
    rather than being posted a second time (a second approval card, a second message)."""
    server = _Counting(redirect=True)
    try:
        client = CountedWebClient(token="xoxb-test", base_url=server.url)
        with pytest.raises(SlackApiError) as raised:
            client.chat_postMessage(channel="C1", text="once")
        assert raised.value.response.status_code == 302
        assert server.posts == 1
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("status", "error"), [(429, "ratelimited"), (500, "fatal_error")])
def test_a_refused_call_fails_and_is_counted_as_before(status: int, error: str) -> None:
    failed: list[tuple[str, str]] = []
    with FakeSlack() as slack:
        client = CountedWebClient(token=slack.token, base_url=slack.url,
                                  on_error=lambda method, why: failed.append((method, why)))
        slack.fail("chat.postMessage", status=status)
        with pytest.raises(SlackApiError) as raised:
            client.chat_postMessage(channel="C1", text="refused")
        assert raised.value.response.status_code == status
        assert raised.value.response["error"] == error
        if status == 429:
            assert raised.value.response.headers["Retry-After"] == "1"
        assert client.chat_postMessage(channel="C1", text="then taken")["ok"]  # the connection goes on
    assert failed == [("chat.postMessage", error)]


def test_an_unreachable_slack_is_counted_as_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    failed: list[tuple[str, str]] = []
    client = CountedWebClient(token="xoxb-test", base_url=f"http://127.0.0.1:{port}/api/",
                              on_error=lambda method, why: failed.append((method, why)))
    with pytest.raises(OSError):
        client.chat_postMessage(channel="C1", text="nobody there")
    assert failed == [("chat.postMessage", "unreachable")]
