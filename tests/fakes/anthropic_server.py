"""FakeAnthropic: a local HTTP server speaking the Messages API wire format, for the real client.

Checks the key (`x-api-key` or `Authorization: Bearer`) and `anthropic-version`, and answers 400 like the real API when user and
assistant turns do not alternate or a `tool_use` is not answered by a `tool_result` right after.
"""

from __future__ import annotations

import itertools
from typing import Any

from tests.fakes.openai_server import FakeModelServer, Scripted

_ids = itertools.count(1)


class FakeAnthropic(FakeModelServer):
    """`POST /v1/messages` and `GET /v1/models`."""

    reply_path = "/v1/messages"

    def __init__(self, api_key: str = "sk-ant-test") -> None:
        super().__init__(api_key)

    @property
    def url(self) -> str:
        """The base URL a client uses (`ANTHROPIC_BASE_URL`); the client adds `/v1/...`."""
        return self.origin

    def check_auth(self, headers: dict[str, str]) -> Scripted | None:
        if not headers.get("anthropic-version"):
            return self.error(400, "anthropic-version: header is required")
        # Older clients send `x-api-key`; anthropic 2.x sends the key as `Authorization: Bearer`.
        if self.api_key not in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")):
            return self.error(401, "invalid x-api-key", kind="authentication_error")
        return None

    def models_page(self) -> dict[str, Any]:
        return {"data": [{"type": "model", "id": "claude-sonnet-4-20250514", "display_name": "Claude Sonnet 4",
                          "created_at": "2025-05-14T00:00:00Z"}], "has_more": False,
                "first_id": "claude-sonnet-4-20250514", "last_id": "claude-sonnet-4-20250514"}

    def error(self, status: int, message: str, **extra: Any) -> Scripted:
        return error(status, message, **extra)

    def validate(self, body: Any) -> str | None:
        messages = body.get("messages", [])
        if not body.get("max_tokens"):
            return "max_tokens: Field required"
        open_ids: set[str] = set()
        for i, message in enumerate(messages):
            expected = "user" if i % 2 == 0 else "assistant"
            if message.get("role") != expected:
                return f"messages: roles must alternate between user and assistant (messages[{i}])"
            blocks = message["content"] if isinstance(message["content"], list) else [
                {"type": "text", "text": message["content"]}]
            problem = _check_blocks(i, blocks, open_ids)
            if problem:
                return problem
            open_ids = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        if open_ids:
            return "the last tool_use blocks have no tool_result"
        return None


def _check_blocks(i: int, blocks: list[dict[str, Any]], open_ids: set[str]) -> str | None:
    answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
    if set(answered) != open_ids and (open_ids or answered):
        return f"messages[{i}]: tool_use ids {sorted(open_ids)} need tool_result blocks, got {answered}"
    leading = [b.get("type") for b in blocks[: len(answered)]]
    if answered and any(t != "tool_result" for t in leading):
        return f"messages[{i}]: tool_result blocks must come first"
    for block in blocks:
        if block.get("type") == "text" and not block.get("text", "").strip():
            return f"messages[{i}]: text content blocks must be non-empty"
        if block.get("type") == "tool_use" and not isinstance(block.get("input"), dict):
            return f"messages[{i}]: tool_use.input: Input should be a valid dictionary"
    return None


def error(status: int, message: str, *, retry_after: str | None = None, delay_s: float = 0.0,
          kind: str = "api_error") -> Scripted:
    """An Anthropic-style error reply."""
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Scripted(body, status=status, headers=headers, delay_s=delay_s)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, args: Any, call_id: str | None = None) -> dict[str, Any]:
    """A `tool_use` block; `args` is sent as-is, so a test can send an input that is not an object."""
    return {"type": "tool_use", "id": call_id or f"toolu_{next(_ids):04d}", "name": name, "input": args}


def message(*content: dict[str, Any], usage: tuple[int, int] = (10, 5),
            model: str = "claude-sonnet-4-20250514", delay_s: float = 0.0,
            cache: tuple[int, int] | None = None) -> Scripted:
    """A Messages API reply with the given content blocks.

    `usage` is (uncached input, output) tokens; `cache`, when given, adds the (written, read) prompt-cache
    tokens, which the API reports apart from `input_tokens`.
    """
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    reported: dict[str, Any] = {"input_tokens": usage[0], "output_tokens": usage[1]}
    if cache is not None:
        reported |= {"cache_creation_input_tokens": cache[0], "cache_read_input_tokens": cache[1]}
    body = {"id": f"msg_{next(_ids):04d}", "type": "message", "role": "assistant", "model": model,
            "content": list(content), "stop_reason": stop, "stop_sequence": None, "usage": reported}
    return Scripted(body, delay_s=delay_s)
