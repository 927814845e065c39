"""Canonical JSON and the hashes built on it: what binds an approval to one exact call. Pure."""

from __future__ import annotations

import hashlib
from typing import Any

from signoff.canonical import arguments_digest, canonical_json

__all__ = ["batch_place", "call_digest", "call_fingerprint", "canonical_json", "idempotency_key", "preview_digest"]


def call_fingerprint(tool: str, args: Any) -> str:
    """Identity of a call regardless of when it was made: tool plus canonical arguments, a number
    being the same number however it is written (`1` and `1.0` are one call, as in JSON)."""
    return arguments_digest(tool, args)[:32]


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
