"""Canonical JSON and the digest of a call's arguments: the one definition the server and the
client share (`signoff.runtime.digests` builds on it; `signoff.receipts` checks receipts with it).

No dependency beyond the standard library, so `signoff.client` can use it without the runtime.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Canonical JSON (sorted keys, compact): the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def numbers_as_one(value: Any) -> Any:
    """`value` with every whole float written as the int it equals (a bool stays a bool): `1` and
    `1.0` are one number, as in JSON."""
    kind = type(value)
    if kind is float:
        return int(value) if value.is_integer() else value
    if kind is dict:
        return {key: numbers_as_one(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [numbers_as_one(item) for item in value]
    return value


def arguments_digest(tool: str, args: Any) -> str:
    """What a receipt binds of a call's arguments: the tool and its canonical arguments (a number the
    same however it is written), as SHA-256 hex; anyone holding the arguments can recompute it."""
    return hashlib.sha256(f"{tool}\n{canonical_json(numbers_as_one(args))}".encode()).hexdigest()
