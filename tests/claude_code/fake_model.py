"""A local stand-in for Anthropic's Messages API, for the real Claude Code CLI.

Speaks the wire format Claude Code uses: `POST /v1/messages` answered as a server-sent event stream
when the request says `"stream": true` (`message_start`, `content_block_start`, `content_block_delta`
with `text_delta` or `input_json_delta`, `content_block_stop`, `message_delta`, `message_stop`), as
one JSON message otherwise; `POST /v1/messages/count_tokens`; and `GET /v1/models`. Any other path is
answered 404 and logged in `unknown`, so a test can show what the CLI asked for.

The script is a function of the conversation, not of the order of requests (Claude Code makes side
requests of its own, e.g. for a title): a request that offers the scripted tool and has no
`tool_result` yet gets the scripted `tool_use`; every other request gets `final_text` and ends.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)
MODEL = "claude-sonnet-4-5"


@dataclass
class Seen:
    """One request the fake answered (or refused)."""

    method: str
    path: str
    body: Any


@dataclass
class FakeModel:
    """Proposes one call to `tool` with `tool_input`, then answers `final_text` once it has a result."""

    tool: str
    tool_input: dict[str, Any]
    final_text: str = "Done."
    seen: list[Seen] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """Every `tool_result` block the CLI sent back, in order (one per request that carried it)."""
        found: dict[str, dict[str, Any]] = {}
        for request in self.seen:
            if request.path.split("?")[0] != "/v1/messages" or not isinstance(request.body, dict):
                continue
            for message in request.body.get("messages", []):
                content = message.get("content")
                if isinstance(content, list):
                    for block in content:
                        if isinstance(block, dict) and block.get("type") == "tool_result":
                            found[block.get("tool_use_id", "")] = block
        return list(found.values())

    def reply(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The content blocks answering this request."""
        offered = {tool.get("name") for tool in body.get("tools", []) if isinstance(tool, dict)}
        answered = any(
            isinstance(block, dict) and block.get("type") == "tool_result"
            for message in body.get("messages", []) if isinstance(message.get("content"), list)
            for block in message["content"])
        if self.tool in offered and not answered:
            return [{"type": "tool_use", "id": f"toolu_fake{next(_ids):04d}", "name": self.tool,
                     "input": self.tool_input}]
        return [{"type": "text", "text": self.final_text}]


def _message(content: list[dict[str, Any]], model: str) -> dict[str, Any]:
    stop = "tool_use" if any(block["type"] == "tool_use" for block in content) else "end_turn"
    return {"id": f"msg_fake{next(_ids):04d}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}


def _events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events that stream `message`, as the Messages API sends them."""
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                           "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


def _handler(fake: FakeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _body(self) -> Any:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                return json.loads(raw) if raw else None
            except ValueError:
                return raw.decode("utf-8", "replace")

        def _json(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _unknown(self, body: Any) -> None:
            fake.record(Seen(self.command, self.path, body))
            with fake._lock:
                fake.unknown.append(f"{self.command} {self.path}")
            self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                       "message": f"{self.command} {self.path}"}})

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/v1/models":
                fake.record(Seen("GET", self.path, None))
                self._json(200, {"data": [{"type": "model", "id": MODEL, "display_name": "Claude Sonnet 4.5",
                                           "created_at": "2025-09-29T00:00:00Z"}],
                                 "has_more": False, "first_id": MODEL, "last_id": MODEL})
            else:
                self._unknown(None)

        def do_HEAD(self) -> None:
            fake.record(Seen("HEAD", self.path, None))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            body = self._body()
            if path == "/v1/messages/count_tokens":
                fake.record(Seen("POST", self.path, body))
                self._json(200, {"input_tokens": 100})
            elif path == "/v1/messages" and isinstance(body, dict):
                fake.record(Seen("POST", self.path, body))
                message = _message(fake.reply(body), str(body.get("model") or MODEL))
                if body.get("stream"):
                    self._stream(message)
                else:
                    self._json(200, message)
            else:
                self._unknown(body)

        def _stream(self, message: dict[str, Any]) -> None:
            data = b"".join(f"event: {name}\ndata: {json.dumps(event)}\n\n".encode()
                            for name, event in _events(message))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
