"""Bounding tool output by shape, not by cutting text: the model always gets valid JSON with counts.

A result larger than the limit is rebuilt with lists cut to their first k items plus
`{"_truncated": "showing k of N items"}`, long strings shortened with a marker, and deep nesting
summarised, tightening step by step until it fits. Pure.
"""

from __future__ import annotations

import json
from typing import Any

MAX_OUTPUT_CHARS = 8_000

# (items kept per list or object, characters kept per string, nesting depth kept), loosest first.
_STEPS: tuple[tuple[int, int, int], ...] = (
    (50, 2_000, 12),
    (20, 1_000, 8),
    (10, 400, 6),
    (5, 200, 4),
    (3, 100, 3),
    (1, 40, 2),
)


def shape_json(value: Any, limit: int = MAX_OUTPUT_CHARS) -> str:
    """`value` as JSON text of at most about `limit` characters, shortened by structure when needed."""
    text = _dump(value)
    if len(text) <= limit:
        return text
    for items, chars, depth in _STEPS:
        shaped = _dump(_shrink(value, items, chars, depth))
        if len(shaped) <= limit:
            return shaped
    return _dump({"_truncated": f"output of {len(text)} characters omitted: too large to show even shortened"})


def shorten(text: str, chars: int) -> str:
    """`text` cut to `chars` characters with a marker that says how much is missing."""
    if len(text) <= chars:
        return text
    return text[:chars] + f"…[truncated: showing {chars} of {len(text)} characters]"


def _shrink(value: Any, items: int, chars: int, depth: int) -> Any:
    if isinstance(value, str):
        return shorten(value, chars)
    if isinstance(value, list):
        if depth <= 0:
            return f"[list of {len(value)} items omitted: nested too deep]"
        kept = [_shrink(v, items, chars, depth - 1) for v in value[:items]]
        if len(value) > items:
            kept.append({"_truncated": f"showing {items} of {len(value)} items"})
        return kept
    if isinstance(value, dict):
        if depth <= 0:
            return f"[object of {len(value)} keys omitted: nested too deep]"
        pairs = list(value.items())
        kept_dict = {shorten(str(k), chars): _shrink(v, items, chars, depth - 1) for k, v in pairs[:items]}
        if len(pairs) > items:
            kept_dict["_truncated"] = f"showing {items} of {len(pairs)} keys"
        return kept_dict
    return value


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)
