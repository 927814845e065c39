"""`anthropic:<model>`: a policy over the Messages API with `tool_use` / `tool_result` blocks.

Uses the official `anthropic` client (extra `signoff[anthropic]`), imported lazily. It is built
with the base URL and key from the mapping the caller passes (`ANTHROPIC_BASE_URL`,
`ANTHROPIC_API_KEY`) and with `max_retries=0`: retries are ours (see `retry.py`), so they stay
bounded, jittered, honour Retry-After and are logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from signoff.extras import install_extra
from signoff.runtime.errors import ConfigError
from signoff.runtime.models.pricing import PriceTable
from signoff.runtime.models.prompt import (
    AssistantCall,
    AssistantCalls,
    AssistantText,
    ToolReply,
    Turn,
    UserText,
    prompt_sha256,
    system_prompt,
    tool_description,
    turns,
)
from signoff.runtime.models.reply import ModelInfo, Reply, ReplyCall, decision_from_reply
from signoff.runtime.models.retry import RetryPolicy, call_with_retries, translate_sdk_errors
from signoff.tools.base import Tool

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
INSTALL_HINT = f"the anthropic client is not installed: {install_extra('anthropic')}"


def make_client(env: Mapping[str, str], timeout_s: float) -> Any:
    """An `anthropic.Anthropic` client with its key and base URL from `env` and the SDK's own retries off.

    The SDK still reads its optional `ANTHROPIC_CUSTOM_HEADERS` from the process environment when
    it is set there.
    """
    try:
        import anthropic
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    api_key = env.get("ANTHROPIC_API_KEY")
    if not api_key:
        raise ConfigError("ANTHROPIC_API_KEY is not set")
    # An explicit key and base URL stop the SDK from looking for its own.
    base_url = env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
    return anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)


def to_messages(conversation: list[Turn]) -> list[dict[str, Any]]:
    """Messages API turns: user and assistant alternate, so consecutive same-role blocks merge; the
    `tool_result` blocks of a reply's calls thus share the one user message that follows it."""
    messages: list[dict[str, Any]] = []
    for turn in conversation:
        role, blocks = _blocks(turn)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    return messages


def _blocks(turn: Turn) -> tuple[str, list[dict[str, Any]]]:
    match turn:
        case UserText(text):
            return "user", _text(text)
        case AssistantText(text):
            return "assistant", _text(text)
        case AssistantCalls(calls, text):
            return "assistant", [*_text(text), *(_tool_use(call) for call in calls)]
        case ToolReply(call_id, _tool, text, is_error):
            return "user", [{"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": is_error}]
    raise AssertionError(f"unknown turn {turn!r}")


def _tool_use(call: AssistantCall) -> dict[str, Any]:
    # `input` must be an object; arguments that were not one are kept under a telling key.
    tool_input = call.args if isinstance(call.args, dict) else {"_unparsed_arguments": call.args}
    return {"type": "tool_use", "id": call.call_id, "name": call.tool, "input": tool_input}


def _text(text: str) -> list[dict[str, Any]]:
    # The API rejects empty text blocks.
    return [{"type": "text", "text": text}] if text.strip() else []


def tool_schemas(tools: list[Tool]) -> list[dict[str, Any]]:
    """Tool definitions for the Messages API; side-effecting ones say they need approval."""
    return [{"name": t.name, "description": tool_description(t), "input_schema": t.json_schema()} for t in tools]


def reply_from_message(message: Any) -> Reply:
    """Reduce a Messages API `Message` to a `Reply`.

    The API reports cache writes and reads apart from `input_tokens`; the `Reply` adds them into its
    `input_tokens`, so the budget counts every input token, and keeps them apart for pricing.
    """
    usage = message.usage
    cache_write_tokens = _count(usage, "cache_creation_input_tokens")
    cache_read_tokens = _count(usage, "cache_read_input_tokens")
    input_tokens = _count(usage, "input_tokens") + cache_write_tokens + cache_read_tokens
    output_tokens = _count(usage, "output_tokens")
    texts, calls = [], []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            tool_input = block.input
            args = tool_input if isinstance(tool_input, dict) else (
                tool_input if isinstance(tool_input, str) else json.dumps(tool_input))
            calls.append(ReplyCall(block.id, block.name, args))
    return Reply("\n".join(t for t in texts if t), calls, input_tokens, output_tokens, served_model=message.model,
                 cache_write_tokens=cache_write_tokens, cache_read_tokens=cache_read_tokens)


def _count(usage: Any, key: str) -> int:
    # The cache fields are optional: absent or null means no cached tokens.
    return getattr(usage, key, 0) or 0


class AnthropicPolicy:
    """A policy backed by the Anthropic Messages API."""

    def __init__(self, model: str, tools: list[Tool], client: Any, *, instructions: str = "",
                 prices: PriceTable, retry: RetryPolicy, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self.model = model
        self.tools = list(tools)
        self.client = client
        self.prices = prices
        self.retry = retry
        self.max_tokens = max_tokens
        self.system = system_prompt(instructions, self.tools)
        self.info = ModelInfo(name=f"anthropic:{model}", model=model, system_prompt_sha256=prompt_sha256(self.system))

    def __call__(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "system": self.system,
                                   "messages": to_messages(turns(history))}
        if self.tools:
            request["tools"] = tool_schemas(self.tools)
        message = call_with_retries(lambda: self._send(request), self.retry, self.info.name)
        return decision_from_reply(reply_from_message(message), self.info, self.prices)

    def _send(self, request: dict[str, Any]) -> Any:
        return translate_errors(lambda: self.client.messages.create(**request), self.info.name)


def translate_errors(call: Any, what: str) -> Any:
    """Run an SDK call, turning its exceptions into `Retryable`, `ModelAuthError` or `ModelUnavailable`."""
    import anthropic

    return translate_sdk_errors(anthropic, call, what, lambda exc: exc.api_message or str(exc.message))


def check(model: str, env: Mapping[str, str], timeout_s: float, retry: RetryPolicy) -> str:
    """One cheap authenticated call: a one-token message to `model`."""
    client = make_client(env, timeout_s)
    what = f"anthropic:{model}"
    request = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]}
    message = call_with_retries(lambda: translate_errors(lambda: client.messages.create(**request), what),
                                retry, what)
    return f"ok: {client.base_url} accepted the key; {message.model!r} answered a one-token message"
