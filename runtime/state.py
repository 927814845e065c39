"""Run state as JSON: reading it (upgrading older versions, validating it whole), writing it, and
the pure helpers around it (digests, keys, redaction).

Pure: no I/O. A run's whole state is one JSON object, so pausing is a status plus a checkpoint and
resuming is deserialisation. Its shape is defined once, as typed models, in `schema.py`
(`RunState`, `SCHEMA_VERSION` 2); a state stored by an older Signoff is upgraded when read
(`state_versions.upgrade`), and one of an unknown version is refused.

History entries (each a JSON object, appended, never rewritten; `history.HistoryEntry`):

    {"role": "user", "content": goal}                                   the goal, always first
    {"role": "assistant", "step": n, "tool": t, "args": {...}, "call_id": c}   a tool call
    {"role": "assistant", "step": n, "final": text}                     the final answer
    {"role": "assistant", "step": n, "malformed": "..."}                a reply we could not use
    {"role": "tool", "step": n, "tool": t, "call_id": c, "result": ...}  a tool's result
    {"role": "tool", "step": n, "tool": t, "call_id": c, "error": "...", "error_kind": k}
    {"role": "runtime", "step": n, "error": "..."}                      feedback on a malformed reply

`error_kind` is one of ERROR_KINDS. Assistant entries may also carry `text` (what the model
said beside its call) and `note` (what an adapter did with its reply, e.g. dropped calls), and
record what produced the turn: `usage` (the tokens and cost the reply reported) and `versions`
(`{"model": spec, "prompt": system prompt hash, "tools": catalogue hash}`; the catalogue hash
names an entry of the state's `contracts`, `{catalogue: {tool: contract hash}}`).

A call's `pending` entry carries `contract`, the hash of its tool's contract when it was proposed.
`repeats` counts the latest turns in a row that repeated an earlier call and got its result again;
`last_versions` is the model and prompt of the latest turn (a change is an audit event).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from signoff.runtime.digests import call_digest, call_fingerprint, canonical_json, idempotency_key
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.frozen import thawed
from signoff.runtime.history import ERROR_KINDS
from signoff.runtime.schema import (
    ACTIVE,
    REOPENABLE,
    SCHEMA_VERSION,
    STATUSES,
    STOPPED,
    TERMINAL,
    USAGE_KEYS,
    WAITING_ON_HUMAN,
    RunState,
    Status,
)
from signoff.runtime.state_versions import upgrade
from signoff.tools.base import Tool

__all__ = [
    "ACTIVE", "DEFAULT_REDACT_KEYS", "ERROR_KINDS", "REDACTED", "REOPENABLE", "SCHEMA_VERSION", "STATUSES", "STOPPED",
    "TERMINAL", "USAGE_KEYS", "WAITING_ON_HUMAN", "Redacted", "Status", "call_digest", "call_fingerprint",
    "canonical_json", "dump_state", "idempotency_key", "is_secret_name", "json_copy", "load_state", "new_state",
    "parse_state", "redact", "secret_names", "upgrade",
]

DEFAULT_REDACT_KEYS: frozenset[str] = frozenset(
    {
        "password", "passwd", "passphrase", "token", "access_token", "refresh_token", "auth_token", "api_token",
        "x_auth_token", "secret", "client_secret", "api_secret", "secret_key", "api_key", "apikey", "x_api_key",
        "authorization", "auth", "cookie", "private_key", "card_number", "cvv", "ssn",
    }
)
"""Credential names hidden everywhere, matched exactly after `_normalise_key` (never as a suffix).

A tool adds its own with `Tool.redact`; any other name is shown, so `run_token` or `sql_auth` is
not hidden from the person asked to approve it."""
REDACTED = "[redacted]"

FINGERPRINT_CHARS = 8


@dataclass(frozen=True)
class Redacted:
    """A secret as shown wherever it is shown (a card, an edit's changes, the audit log): its JSON
    type, its size and a fingerprint, never its value."""

    kind: str
    length: int
    fingerprint: str

    @classmethod
    def of(cls, value: Any) -> Redacted:
        text = canonical_json(value)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:FINGERPRINT_CHARS]
        if isinstance(value, str):
            return cls("string", len(value), digest)
        return cls(_json_kind(value), len(text), digest)

    def __str__(self) -> str:
        # Unquoted and in brackets, so it can never be mistaken for a string that says "[redacted]".
        size = f"{self.length} chars" if self.kind == "string" else f"{self.kind}, {self.length} chars of JSON"
        return f"[redacted: {size}, #{self.fingerprint}]"


def _json_kind(value: Any) -> str:
    match value:
        case bool():
            return "boolean"
        case None:
            return "null"
        case int() | float():
            return "number"
        case list() | tuple():
            return "array"
        case _:
            return "object"


json_copy = thawed
"""A plain deep copy of JSON-shaped data (see `frozen.thawed`)."""


def new_state(run_id: str, budget: dict[str, Any]) -> dict[str, Any]:
    """A fresh, not yet started run, as a plain JSON object of the current version."""
    state = RunState.fresh(run_id, budget).to_json()
    state["history"] = []
    return state


def parse_state(blob: str | dict[str, Any], *, fresh: bool = False) -> tuple[RunState, dict[str, Any]]:
    """Parse, upgrade and validate a checkpoint; refuse what we cannot read rather than guess.

    Returns the typed state and its JSON (the current version's). A dict is copied, so the caller's
    stays its own, unless `fresh` says nobody else holds it (it was just parsed from storage).
    """
    if isinstance(blob, str):
        try:
            state = json.loads(blob)
        except json.JSONDecodeError as exc:
            raise IncompatibleState(f"run state is not valid JSON: {exc}") from None
    else:
        state = blob if fresh else thawed(blob)
    if not isinstance(state, dict):
        raise IncompatibleState("run state is not a JSON object")
    state = upgrade(state)
    try:
        return RunState.model_validate(state), state
    except ValidationError as exc:
        raise IncompatibleState(_refusal(exc)) from None


def load_state(blob: str | dict[str, Any], *, fresh: bool = False) -> dict[str, Any]:
    """`parse_state`'s JSON: a checkpoint checked whole and brought to the current version."""
    return parse_state(blob, fresh=fresh)[1]


def dump_state(state: dict[str, Any]) -> str:
    """Canonical JSON: the same state always gives the same text."""
    return canonical_json(state)


def _refusal(exc: ValidationError) -> str:
    """Why a state is refused, in words: the keys it lacks, an unknown status, or where its shape is
    wrong (a few places at most, without echoing values, which may be secret)."""
    errors = exc.errors(include_url=False)
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
    if missing:
        return f"run state is missing {', '.join(missing)}"
    status = next((e for e in errors if e["loc"] == ("status",)), None)
    if status is not None:
        return f"run state has unknown status {status['input']!r}; known: {', '.join(STATUSES)}"
    places = [f"{_where(e['loc'])}: {e['msg']}" for e in errors[:3]]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return f"run state is malformed: {'; '.join(places)}{more}"


def _where(loc: tuple[int | str, ...]) -> str:
    """`history[3].tool_call.args`: a position in the state as a reader would write it."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "(the state)"


def secret_names(*tools: Tool | None, configured: Iterable[str] = DEFAULT_REDACT_KEYS) -> frozenset[str]:
    """The names hidden in the calls of `tools`: `configured` (which replaces the built-in names)
    plus each tool's own `Tool.redact`; None stands for a tool this process has not loaded."""
    return frozenset(configured).union(*(tool.redact for tool in tools if tool is not None))


def redact(value: Any, keys: frozenset[str] | set[str] = DEFAULT_REDACT_KEYS,
           mask: Callable[[Any], Any] = lambda secret: REDACTED) -> Any:
    """A copy of `value` with every dict entry whose key is a secret name replaced by `mask(its value)`.

    A key is a secret name when, normalised, it equals one of `keys` normalised: `apiKey` and
    `API-Key` match `api_key`, but `run_token` does not match `token` (no suffix matching).
    """
    lowered = _normalised(frozenset(keys))

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (mask(v) if isinstance(k, str) and _normalise_key(k) in lowered else walk(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(value)


def is_secret_name(name: str, keys: frozenset[str] | set[str] = DEFAULT_REDACT_KEYS) -> bool:
    """Whether `redact` hides an entry named `name`."""
    return _normalise_key(name) in _normalised(frozenset(keys))


@functools.lru_cache(maxsize=64)
def _normalised(keys: frozenset[str]) -> frozenset[str]:
    return frozenset(_normalise_key(k) for k in keys)


def _normalise_key(key: str) -> str:
    """`accessToken`, `Access-Token` and `access_token` all become `access_token`."""
    return _CAMEL_HUMP.sub("_", key).lower().replace("-", "_")


_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
