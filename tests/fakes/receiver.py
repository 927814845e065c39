"""WebhookReceiver: an audit webhook's receiver on 127.0.0.1:0 that records every request it gets
and answers 204, or 503 while it is `down`; the signature is checked by the test, with the recipe
the docs give."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Delivery:
    """One request as received: its signature header, body, and what it answered."""

    signature: str
    content_type: str
    body: bytes
    status: int

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


class WebhookReceiver:
    """Records each POST; `down` makes it answer 503 (the request is still recorded)."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.down = False
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = 503 if receiver.down else 204
                with receiver._lock:
                    receiver.deliveries.append(Delivery(self.headers.get("Signoff-Signature", ""),
                                                        self.headers.get("Content-Type", ""), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/signoff"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def taken(self) -> list[Delivery]:
        """The requests it answered 2xx, in the order they arrived."""
        with self._lock:
            return [d for d in self.deliveries if d.status < 300]

    def refused(self) -> int:
        with self._lock:
            return sum(1 for d in self.deliveries if d.status >= 300)


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "the condition") -> None:
    """Return once `condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def documented_recipe() -> dict[str, Any]:
    """The receiver recipe of docs/audit-webhook.md (its Python block), run: `verified`, `Receiver`."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "audit-webhook.md").read_text(encoding="utf-8")
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {"__name__": "recipe"}
    exec(compile(code, "docs/audit-webhook.md", "exec"), namespace)
    return namespace
