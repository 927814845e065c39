"""What a policy returned, read: the usage it reports charged to the run, and whether it is usable.

Pure: policies are untrusted, so every field is checked and nothing here raises on bad input.
"""

from __future__ import annotations

import json
import math
from typing import Any

from signoff.runtime.schema import Usage

MAX_MALFORMED_CHARS = 500


def charge_usage(raw: Any, usage: Usage) -> tuple[Any, dict[str, Any] | None, Usage]:
    """Count the model call and add the tokens and cost `raw` reports to `usage`.

    Returns the decision without its `usage` and `model` keys, the `model` metadata if any, and the
    usage with this call charged.
    """
    charged: dict[str, Any] = {"model_calls": usage.model_calls + 1}
    if not isinstance(raw, dict):
        return raw, None, usage.evolved(**charged)
    decision = dict(raw)
    reported = decision.pop("usage", None)
    if isinstance(reported, dict):
        charged["input_tokens"] = usage.input_tokens + int(reported_count(reported.get("input_tokens")))
        charged["output_tokens"] = usage.output_tokens + int(reported_count(reported.get("output_tokens")))
        charged["cost_usd"] = round(usage.cost_usd + float(reported_count(reported.get("cost_usd"), float)), 8)
    model = decision.pop("model", None)
    return decision, model if isinstance(model, dict) else None, usage.evolved(**charged)


def malformed(decision: Any) -> str | None:
    """Why a decision cannot be used, or None when it is a valid tool call, several (`calls`), or a
    final answer."""
    if not isinstance(decision, dict):
        return f"malformed decision: expected a JSON object, got {type(decision).__name__}"
    if "error" in decision and "tool" not in decision and "final" not in decision and "calls" not in decision:
        return f"malformed decision: {decision['error']}"
    if "calls" in decision:
        calls = decision["calls"]
        if "tool" in decision or "final" in decision:
            return "malformed decision: give 'calls', or one of 'tool' (with 'args') or 'final', not both"
        if not isinstance(calls, list) or not calls:
            return "malformed decision: 'calls' must be a non-empty list of tool calls"
        if not all(isinstance(call, dict) and isinstance(call.get("tool"), str) and call["tool"] for call in calls):
            return "malformed decision: each of 'calls' must be an object with a tool name in 'tool' (and 'args')"
        return None
    has_tool, has_final = "tool" in decision, "final" in decision
    if has_tool == has_final:
        return "malformed decision: give exactly one of 'tool' (with 'args') or 'final'"
    if has_tool and (not isinstance(decision["tool"], str) or not decision["tool"]):
        return "malformed decision: 'tool' must be a tool name"
    return None


def shortened(value: Any) -> str:
    """A malformed decision as text, cut to `MAX_MALFORMED_CHARS` for the history."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_MALFORMED_CHARS else text[:MAX_MALFORMED_CHARS] + "…"


def reported_count(value: Any, kind: type[int] | type[float] = int) -> float:
    """A token count or cost as reported; anything negative, infinite or not a number counts as 0."""
    try:
        number = kind(value or 0)
    except (TypeError, ValueError, OverflowError):  # int(inf) overflows, int(nan) is a ValueError
        return kind(0)
    return number if 0 <= number < math.inf else kind(0)


def jsonable(value: Any) -> Any:
    """Tool results must survive a checkpoint: anything JSON cannot hold becomes its text.

    What a JSON round trip gives: plain JSON (exact dicts with string keys, lists, tuples, strings,
    numbers, booleans, None) is copied by a walk, several times faster than the round trip it
    equals; anything else takes the round trip itself."""
    try:
        return _plain_copy(value)
    except (_NotPlain, RecursionError):  # not plain JSON (or circular): the round trip decides
        pass
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def is_plain_json(value: Any) -> bool:
    """Whether `value` is made only of exact JSON types (dicts with string keys, lists, strings,
    numbers, booleans, None): a valid `JsonValue` as it is, with nothing to convert."""
    try:
        return _is_plain(value)
    except RecursionError:  # nested too deep to walk: validation decides
        return False


def _is_plain(value: Any) -> bool:
    # Loops rather than all(...): this walks every call's arguments and result, and a generator
    # per container costs more than the walk itself.
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return True
    if kind is dict:
        for key, item in value.items():  # noqa: SIM110
            if type(key) is not str or not _is_plain(item):
                return False
        return True
    if kind is list:
        for item in value:  # noqa: SIM110
            if not _is_plain(item):
                return False
        return True
    return False


class _NotPlain(Exception):
    """A value `_plain_copy` leaves to the JSON round trip."""


def _plain_copy(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            copied[key] = _plain_copy(item)
        return copied
    if kind is list or kind is tuple:  # JSON has arrays only: a tuple becomes one
        return [_plain_copy(item) for item in value]
    raise _NotPlain
