"""FakeOpenAI: a local HTTP server speaking the Chat Completions wire format, for the real client.

`FakeModelServer` is the shared part (also used by `anthropic_server.py`): a ThreadingHTTPServer on
127.0.0.1 port 0 that checks auth, records every request body, and answers from a script of
replies, including error statuses with headers and delays. Like the real API, it answers 400 when
the conversation breaks the tool-call pairing rules, so a test fails if we send one that would.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Scripted:
    """One scripted answer: status, JSON body, extra headers, and a delay before answering."""

    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeModelServer:
    """Scripted replies for the model endpoint; subclasses define auth, paths and validation."""

    reply_path = ""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.requests: list[Recorded] = []
        self._replies: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *replies: Scripted) -> None:
        """Queue replies for the model endpoint, answered in order."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def bodies(self) -> list[Any]:
        """Request bodies sent to the model endpoint, in order."""
        return [r.body for r in self.requests if r.path == self.reply_path]

    @property
    def pending(self) -> int:
        return len(self._replies)

    def answer(self, method: str, path: str, headers: dict[str, str], body: Any) -> Scripted:
        with self._lock:
            self.requests.append(Recorded(method, path, headers, body))
        denied = self.check_auth(headers)
        if denied is not None:
            return denied
        if method == "GET" and path == "/v1/models":
            return Scripted(self.models_page())
        if method != "POST" or path != self.reply_path:
            return self.error(404, f"no route {method} {path}")
        problem = self.validate(body)
        if problem:
            return self.error(400, problem)
        with self._lock:
            if not self._replies:
                return self.error(500, "the fake server has no scripted reply left")
            return self._replies.popleft()

    # Subclasses: the provider's own wire details.
    def check_auth(self, headers: dict[str, str]) -> Scripted | None:
        raise NotImplementedError

    def validate(self, body: Any) -> str | None:
        raise NotImplementedError

    def models_page(self) -> dict[str, Any]:
        raise NotImplementedError

    def error(self, status: int, message: str, **extra: Any) -> Scripted:
        raise NotImplementedError


def _handler(fake: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = fake.answer(method, self.path.split("?")[0], headers, body)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            data = json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing left to say

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


_ids = itertools.count(1)


class FakeOpenAI(FakeModelServer):
    """`POST /v1/chat/completions` and `GET /v1/models`, with `Authorization: Bearer <key>`."""

    reply_path = "/v1/chat/completions"

    def __init__(self, api_key: str = "sk-test") -> None:
        super().__init__(api_key)

    @property
    def url(self) -> str:
        """The base URL a client uses (`OPENAI_BASE_URL`)."""
        return self.origin + "/v1"

    def check_auth(self, headers: dict[str, str]) -> Scripted | None:
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return self.error(401, "Incorrect API key provided.", code="invalid_api_key")
        return None

    def models_page(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                                           for m in ("gpt-4o", "gpt-4o-mini")]}

    def error(self, status: int, message: str, **extra: Any) -> Scripted:
        return error(status, message, **extra)

    def validate(self, body: Any) -> str | None:
        """The pairing rules: each tool call is answered by one `tool` message before anything else."""
        open_ids: list[str] = []
        for i, message in enumerate(body.get("messages", [])):
            role = message.get("role")
            if role == "tool":
                if message.get("tool_call_id") not in open_ids:
                    return f"messages[{i}]: tool message answers no open tool call"
                open_ids.remove(message["tool_call_id"])
                continue
            if open_ids:
                return f"messages[{i}]: tool calls {open_ids} were not answered"
            if role == "assistant" and message.get("tool_calls"):
                open_ids = [c["id"] for c in message["tool_calls"]]
        return None


def error(status: int, message: str, *, retry_after: str | None = None, delay_s: float = 0.0,
          code: str | None = None) -> Scripted:
    """An OpenAI-style error reply."""
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    body = {"error": {"message": message, "type": "error", "param": None, "code": code}}
    return Scripted(body, status=status, headers=headers, delay_s=delay_s)


def tool_call(name: str, args: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """One entry of `message.tool_calls`; a string `args` is sent as-is (e.g. invalid JSON)."""
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"id": call_id or f"call_{next(_ids)}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def completion(text: str | None = None, calls: list[dict[str, Any]] | None = None, *,
               usage: tuple[int, int] = (10, 5), model: str = "gpt-4o-2024-08-06",
               delay_s: float = 0.0, cached_tokens: int | None = None) -> Scripted:
    """A Chat Completions reply with optional text and tool calls.

    `usage` is (prompt, completion) tokens; `cached_tokens`, when given, is sent as
    `prompt_tokens_details.cached_tokens`, which like the real API's is part of the prompt tokens.
    """
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    reported: dict[str, Any] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    if cached_tokens is not None:
        reported["prompt_tokens_details"] = {"cached_tokens": cached_tokens, "audio_tokens": 0}
    body = {
        "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": reported,
    }
    return Scripted(body, delay_s=delay_s)
