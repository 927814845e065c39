"""Servers that break the approval API's contract, for the failure modes of its callers that the
real `signoff serve` never shows (the contract itself is tested against the real server).

`Garbage` answers every request with one status and body, whatever was asked: an HTML error page,
a body that is not JSON, an unknown status. `Stalling` takes a request for an approval and then,
asked for the decision, either never answers (`hang`) or answers "pending" at once however long it
was asked to wait, `pending_answers` times, and then "approved": a long poll cut short, which a
client must ask again. Closing a server ends whatever it is holding.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

APPROVAL = {"id": "apr_1", "args": {"amount": 20}, "digest": "d" * 64, "expires_at": "2030-01-01T00:00:00+00:00"}


class _Server:
    """A threaded HTTP server on a free port that answers with `answer(method, path)`."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        """Each request, as "METHOD /path?query"."""
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                server.seen.append(f"{self.command} {self.path}")
                status, content_type, body = server.answer(self.command, self.path)
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def answer(self, method: str, path: str) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()  # a held answer ends, so the server's threads end
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"


@dataclass
class Garbage(_Server):
    """Answers every request with `status` and `body` as they are."""

    status: int = 500
    body: bytes = b"<html>Internal Server Error</html>"
    content_type: str = "text/html"

    def __post_init__(self) -> None:
        super().__init__()

    def answer(self, method: str, path: str) -> tuple[int, str, bytes]:
        return self.status, self.content_type, self.body


@dataclass
class Stalling(_Server):
    """Takes any request for an approval (201, "pending"); asked for its decision, hangs until closed
    (`hang`), or answers "pending" at once `pending_answers` times and then "approved"."""

    hang: bool = False
    pending_answers: int = 2
    answered: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def answer(self, method: str, path: str) -> tuple[int, str, bytes]:
        if method == "POST":
            return 201, "application/json", json.dumps({**APPROVAL, "status": "pending"}).encode()
        if self.hang:
            self.closing.wait()
        status = "pending" if len(self.answered) < self.pending_answers else "approved"
        self.answered.append(status)
        return 200, "application/json", json.dumps({**APPROVAL, "status": status}).encode()
