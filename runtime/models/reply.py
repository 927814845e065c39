"""From a provider's reply to a decision the Agent understands. Pure.

    one tool call         -> {"tool", "args", "call_id"}, plus "text" if the model also wrote some
    several tool calls    -> {"calls": [{"tool", "args", "call_id"}, ...]} in the provider's order,
                             plus "text" if the model also wrote some
    text only             -> {"final": text}
    neither               -> {"error": "the model returned neither a tool call nor text"}
    arguments not JSON    -> "args" is the raw string; the Agent answers it as invalid_args
Every decision also carries "usage" (tokens and cost) and "model" (name, system prompt digest).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from signoff.runtime.models.pricing import PriceTable

NO_REPLY = "the model returned neither a tool call nor text"


@dataclass(frozen=True)
class ReplyCall:
    """One tool call in a reply, with the provider's id for it."""

    call_id: str
    name: str
    args: dict[str, Any] | str


@dataclass(frozen=True)
class Reply:
    """A provider reply reduced to what a decision needs."""

    text: str
    calls: list[ReplyCall]
    input_tokens: int
    """Every input token, cached or not: the token budget counts them all."""
    output_tokens: int
    served_model: str | None = None
    """The model name the provider reports, often a dated version of the one requested."""
    notes: list[str] = field(default_factory=list)
    cache_write_tokens: int = 0
    """The part of `input_tokens` written to the provider's prompt cache, priced at `cache_write`."""
    cache_read_tokens: int = 0
    """The part of `input_tokens` read from the provider's prompt cache, priced at `cache_read`."""


@dataclass(frozen=True)
class ModelInfo:
    """Who answers: recorded in the run state so a run can say which model and prompt made it."""

    name: str
    """The spec, e.g. `openai:gpt-4o`."""
    model: str
    """The provider's model name, used for pricing."""
    system_prompt_sha256: str


def parse_arguments(raw: str | None) -> dict[str, Any] | str:
    """Tool arguments as an object, or the raw text when it is not a JSON object."""
    if raw is None or not raw.strip():
        return {}  # some servers send "" for a call without arguments
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    return value if isinstance(value, dict) else raw


def decision_from_reply(reply: Reply, info: ModelInfo, prices: PriceTable) -> dict[str, Any]:
    """The decision for `reply`, with usage, cost and model metadata attached."""
    notes = list(reply.notes)
    decision: dict[str, Any]
    if reply.calls:
        calls: list[dict[str, Any]] = [{"tool": c.name, "args": c.args, "call_id": c.call_id} for c in reply.calls]
        decision = calls[0] if len(calls) == 1 else {"calls": calls}
        if reply.text.strip():
            decision["text"] = reply.text
    elif reply.text.strip():
        decision = {"final": reply.text}
    else:
        decision = {"error": NO_REPLY}
    models = [m for m in (reply.served_model, info.model) if m]
    cost, price_note = prices.cost(models, reply.input_tokens, reply.output_tokens,
                                   cache_write_tokens=reply.cache_write_tokens,
                                   cache_read_tokens=reply.cache_read_tokens)
    if price_note:
        notes.append(price_note)
    if notes:
        decision["note"] = "; ".join(notes)
    decision["usage"] = {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                         "cost_usd": cost}
    decision["model"] = {"name": info.name, "system_prompt_sha256": info.system_prompt_sha256}
    if reply.served_model and reply.served_model != info.model:
        decision["model"]["served_model"] = reply.served_model
    return decision
