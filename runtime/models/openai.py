"""`openai:<model>`: a policy over the Chat Completions API with native tool calling.

Uses the official `openai` client (extra `signoff[openai]`), imported lazily. It is built with the
base URL and key from the mapping the caller passes (`OPENAI_BASE_URL`, `OPENAI_API_KEY`), so any
OpenAI-compatible server works, and with `max_retries=0`: retries are ours (see `retry.py`), so
they stay bounded, jittered, honour Retry-After and are logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from signoff.extras import install_extra
from signoff.runtime.errors import ConfigError
from signoff.runtime.models.pricing import PriceTable
from signoff.runtime.models.prompt import (
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
from signoff.runtime.models.reply import ModelInfo, Reply, ReplyCall, decision_from_reply, parse_arguments
from signoff.runtime.models.retry import RetryPolicy, call_with_retries, translate_sdk_errors
from signoff.tools.base import Tool

DEFAULT_BASE_URL = "https://api.openai.com/v1"
INSTALL_HINT = f"the openai client is not installed: {install_extra('openai')}"


def make_client(env: Mapping[str, str], timeout_s: float) -> Any:
    """An `openai.OpenAI` client with its key and base URL from `env` and the SDK's own retries off.

    The SDK still reads its optional `OPENAI_ORG_ID` and `OPENAI_PROJECT_ID` from the process
    environment when they are set there.
    """
    try:
        import openai
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    api_key = env.get("OPENAI_API_KEY")
    if not api_key:
        raise ConfigError("OPENAI_API_KEY is not set (for a local server that needs no key, set any value)")
    # An explicit base URL stops the SDK from reading OPENAI_BASE_URL from the process environment.
    base_url = env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    return openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)


def to_messages(system: str, conversation: list[Turn]) -> list[dict[str, Any]]:
    """Chat Completions messages: the calls of a reply in one assistant message, each answered by a
    `tool` message with its id."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in conversation:
        match turn:
            case UserText(text):
                messages.append({"role": "user", "content": text})
            case AssistantText(text):
                messages.append({"role": "assistant", "content": text})
            case AssistantCalls(calls, text):
                messages.append({"role": "assistant", "content": text or None, "tool_calls": [
                    {"id": call.call_id, "type": "function",
                     "function": {"name": call.tool, "arguments": _arguments(call.args)}} for call in calls]})
            case ToolReply(call_id, _tool, text, _is_error):
                messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    return messages


def _arguments(args: dict[str, Any] | str) -> str:
    # Arguments that were not a JSON object go back as the model sent them.
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def tool_schemas(tools: list[Tool]) -> list[dict[str, Any]]:
    """Function tools for Chat Completions; side-effecting ones say they need approval."""
    return [{"type": "function", "function": {"name": t.name, "description": tool_description(t),
                                              "parameters": t.json_schema()}} for t in tools]


def reply_from_completion(completion: Any) -> Reply:
    """Reduce a `ChatCompletion` to a `Reply`; a refusal counts as text."""
    usage = completion.usage
    inputs, outputs = int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)
    cached = _cached_prompt_tokens(usage)
    if not completion.choices:
        return Reply("", [], inputs, outputs, served_model=completion.model, cache_read_tokens=cached,
                     notes=["the reply had no choices"])
    message = completion.choices[0].message
    calls = [
        ReplyCall(call.id, call.function.name, parse_arguments(call.function.arguments))
        for call in (message.tool_calls or [])
        if getattr(call, "function", None) is not None
    ]
    text = message.content or getattr(message, "refusal", None) or ""
    return Reply(text, calls, inputs, outputs, served_model=completion.model, cache_read_tokens=cached)


def _cached_prompt_tokens(usage: Any) -> int:
    """The prompt tokens read from OpenAI's cache, already counted in `prompt_tokens`.

    Compatible servers such as vLLM often omit `prompt_tokens_details` or send it as null: none cached.
    """
    details = getattr(usage, "prompt_tokens_details", None)
    return getattr(details, "cached_tokens", None) or 0


class OpenAIPolicy:
    """A policy backed by an OpenAI-compatible Chat Completions endpoint."""

    def __init__(self, model: str, tools: list[Tool], client: Any, *, instructions: str = "",
                 prices: PriceTable, retry: RetryPolicy) -> None:
        self.model = model
        self.tools = list(tools)
        self.client = client
        self.prices = prices
        self.retry = retry
        self.system = system_prompt(instructions, self.tools)
        self.info = ModelInfo(name=f"openai:{model}", model=model, system_prompt_sha256=prompt_sha256(self.system))

    def __call__(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": to_messages(self.system, turns(history))}
        if self.tools:
            request["tools"] = tool_schemas(self.tools)
        completion = call_with_retries(lambda: self._send(request), self.retry, self.info.name)
        return decision_from_reply(reply_from_completion(completion), self.info, self.prices)

    def _send(self, request: dict[str, Any]) -> Any:
        return translate_errors(lambda: self.client.chat.completions.create(**request), self.info.name)


def translate_errors(call: Any, what: str) -> Any:
    """Run an SDK call, turning its exceptions into `Retryable`, `ModelAuthError` or `ModelUnavailable`."""
    import openai

    return translate_sdk_errors(openai, call, what, _error_message)


def check(model: str, env: Mapping[str, str], timeout_s: float, retry: RetryPolicy) -> str:
    """One cheap authenticated call, `GET /models`; says whether `model` is listed."""
    client = make_client(env, timeout_s)
    what = f"openai:{model}"
    page = call_with_retries(lambda: translate_errors(client.models.list, what), retry, what)
    names = {m.id for m in page.data}
    listed = "listed" if model in names else "not in the list (the server may still accept it)"
    return f"ok: {client.base_url} accepted the key; {len(names)} models, {model!r} {listed}"


def _error_message(exc: Any) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return str(exc.message)
