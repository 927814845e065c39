"""Run state as plain JSON: its shape, its version, and the pure helpers that read it.

Pure: no I/O. A run's whole state is one JSON object, so pausing is a status plus a
checkpoint and resuming is deserialisation.

History entries (each a dict, appended, never rewritten):

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
from typing import Any, Literal

from signoff.runtime.errors import IncompatibleState
from signoff.tools.base import Tool

SCHEMA_VERSION = 1

Status = Literal[
    "idle",
    "running",
    "awaiting_approval",
    "done",
    "budget_exhausted",
    "failed",
    "cancelled",
    "expired",
    "needs_reconciliation",
    "stalled",
]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]  # Literal keeps its members here
TERMINAL: frozenset[str] = frozenset({"done", "cancelled", "expired"})
"""Statuses a run never leaves."""
WAITING_ON_HUMAN: frozenset[str] = frozenset(
    {"awaiting_approval", "budget_exhausted", "failed", "needs_reconciliation", "stalled"}
)
"""Statuses where the run keeps its state and waits for a person (decide, extend, retry, reconcile)."""

ERROR_KINDS = ("exception", "unknown_tool", "invalid_args", "denied", "duplicate", "timeout", "refused")

USAGE_KEYS = ("model_calls", "tool_calls", "input_tokens", "output_tokens", "cost_usd", "seconds")

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


def new_state(run_id: str, budget: dict[str, Any]) -> dict[str, Any]:
    """A fresh, not yet started run."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "goal": None,
        "status": "idle",
        "history": [],
        "steps": 0,
        "pending": None,
        "answer": None,
        "stop": None,
        "budget": dict(budget),
        "usage": {k: (0.0 if k in ("cost_usd", "seconds") else 0) for k in USAGE_KEYS},
        "fingerprints": {},
        "model": None,
    }


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), several times faster than
    `copy.deepcopy`, which a long run's history makes worth having. Other values are shared."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(json_copy(v) for v in value)
    return value


def load_state(blob: str | dict[str, Any], *, fresh: bool = False) -> dict[str, Any]:
    """Parse and check a checkpoint; refuse what we cannot read rather than guess.

    A dict is copied, so the caller's stays its own, unless `fresh` says nobody else holds it
    (it was just parsed from storage).
    """
    if isinstance(blob, str):
        try:
            state = json.loads(blob)
        except json.JSONDecodeError as exc:
            raise IncompatibleState(f"run state is not valid JSON: {exc}") from None
    else:
        state = blob if fresh else json_copy(blob)
    if not isinstance(state, dict):
        raise IncompatibleState("run state is not a JSON object")
    version = state.get("schema_version")
    if version != SCHEMA_VERSION:
        raise IncompatibleState(
            f"run state has schema version {version!r}; this Signoff reads version {SCHEMA_VERSION}"
        )
    missing = [k for k in ("run_id", "status", "history", "steps", "pending", "budget", "usage") if k not in state]
    if missing:
        raise IncompatibleState(f"run state is missing {', '.join(missing)}")
    if state["status"] not in STATUSES:
        raise IncompatibleState(f"run state has unknown status {state['status']!r}")
    if not isinstance(state["history"], list) or not isinstance(state["steps"], int):
        raise IncompatibleState("run state has a malformed history or step count")
    state.setdefault("fingerprints", {})
    return state


def dump_state(state: dict[str, Any]) -> str:
    """Canonical JSON: the same state always gives the same text."""
    return json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """Canonical JSON used for digests and duplicate detection."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_fingerprint(tool: str, args: Any) -> str:
    """Identity of a call regardless of when it was made: tool plus canonical arguments."""
    return hashlib.sha256(f"{tool}\n{canonical_json(args)}".encode()).hexdigest()[:32]


def call_digest(tool: str, args: Any, key: str) -> str:
    """Binds an approval to exactly one call: tool, canonical arguments and idempotency key."""
    return hashlib.sha256(f"{tool}\n{canonical_json(args)}\n{key}".encode()).hexdigest()


def idempotency_key(run_id: str, step: int) -> str:
    """`run_id:step`, the key a side-effecting tool receives."""
    return f"{run_id}:{step}"


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


@functools.lru_cache(maxsize=64)
def _normalised(keys: frozenset[str]) -> frozenset[str]:
    return frozenset(_normalise_key(k) for k in keys)


def _normalise_key(key: str) -> str:
    """`accessToken`, `Access-Token` and `access_token` all become `access_token`."""
    return _CAMEL_HUMP.sub("_", key).lower().replace("-", "_")


_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
