"""Canonical JSON and the hashes built on it: what binds an approval to one exact call. Pure."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Canonical JSON (sorted keys, compact): the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_fingerprint(tool: str, args: Any) -> str:
    """Identity of a call regardless of when it was made: tool plus canonical arguments, a number
    being the same number however it is written (`1` and `1.0` are one call, as in JSON)."""
    return hashlib.sha256(f"{tool}\n{canonical_json(_numbers_as_one(args))}".encode()).hexdigest()[:32]


def _numbers_as_one(value: Any) -> Any:
    """`value` with every whole float written as the int it equals (a bool stays a bool)."""
    kind = type(value)
    if kind is float:
        return int(value) if value.is_integer() else value
    if kind is dict:
        return {key: _numbers_as_one(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_numbers_as_one(item) for item in value]
    return value


def call_digest(tool: str, args: Any, key: str, preview: str | None = None) -> str:
    """Binds an approval to exactly one call: tool, canonical arguments and idempotency key, and
    what its preview showed (`preview`: the preview's digest; None: the call has none)."""
    bound = f"{tool}\n{canonical_json(args)}\n{key}" + (f"\n{preview}" if preview is not None else "")
    return hashlib.sha256(bound.encode()).hexdigest()


def preview_digest(shown: Any) -> str:
    """What a preview showed, as the digest an approval binds."""
    return hashlib.sha256(canonical_json(shown).encode()).hexdigest()[:32]


def idempotency_key(run_id: str, step: int, place: int | None = None) -> str:
    """`run_id:step`, the key a side-effecting tool receives; `run_id:step.n` for the n-th call
    (from 1) of a turn that made several, so each has its own key, the same however often the
    turn is read."""
    return f"{run_id}:{step}" if place is None else f"{run_id}:{step}.{place}"


def batch_place(key: str) -> int | None:
    """n, for the key `run_id:step.n` of a turn's n-th call (`idempotency_key`); None for `run_id:step`."""
    _, _, step = key.rpartition(":")
    _, dot, place = step.partition(".")
    return int(place) if dot and place.isdigit() else None
