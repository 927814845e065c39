"""What the HTTP tool tests share: a real HTTP server on 127.0.0.1 in a thread that records every
request (method, path, query, headers, body) and answers from routes a test sets, including slow,
endless and redirecting answers."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass(frozen=True)
class Recorded:
    """One request as it arrived: `path` as it went over the wire (still percent-encoded)."""

    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Answer:
    """How the server answers one method and path."""

    status: int = 200
    body: bytes | str | Any = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    endless: bool = False
    """Send the body again and again until the client hangs up (`sent` counts the bytes)."""


class FakeApi:
    """`with FakeApi() as api:` serves on `api.url`; `api.answer("POST", "/x", status=201, body={...})`."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.sent = 0
        self._answers: dict[tuple[str, str], Answer] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def answer(self, method: str, path: str, **answer: Any) -> None:
        self._answers[(method, path)] = Answer(**answer)

    def __enter__(self) -> FakeApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _record(self, request: Recorded) -> Answer:
        with self._lock:
            self.requests.append(request)
        return self._answers.get((request.method, request.path), Answer(404, {"error": "no such route"}))


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            answer = api._record(Recorded(self.command, parts.path, parse_qsl(parts.query, keep_blank_values=True),
                                          dict(self.headers.items()), body))
            time.sleep(answer.delay_s)
            payload, kind = _payload(answer)
            try:
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type or kind)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if answer.endless:
                    self.send_header("Connection", "close")
                    self.end_headers()
                    while True:
                        self.wfile.write(payload)
                        api.sent += len(payload)
                else:
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client hung up: what an endless or slow answer expects

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


def _payload(answer: Answer) -> tuple[bytes, str]:
    if isinstance(answer.body, bytes):
        return answer.body, "application/octet-stream"
    if isinstance(answer.body, str):
        return answer.body.encode(), "text/plain; charset=utf-8"
    return json.dumps(answer.body).encode(), "application/json"
