"""Stalls: a run whose turns keep calling a tool as before and getting the same result again. Pure."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from signoff.runtime.digests import canonical_json
from signoff.runtime.history import HistoryEntry, ToolCall, ToolError, ToolResult


class Repeats:
    """Counts the latest turns in a row that repeated an earlier call and got its result again.

    It remembers the outcomes the run has seen; a resumed run's are read from its history once,
    on the first turn counted.
    """

    def __init__(self) -> None:
        self._seen: set[str] | None = None

    def after_turn(self, history: Sequence[HistoryEntry], repeats: int) -> int | None:
        """The count once the latest turn is taken into account, or None when that turn was not a
        call with an outcome (nothing to count)."""
        if len(history) < 2:
            return None
        call, seen = history[-2], history[-1]
        if not isinstance(call, ToolCall) or not isinstance(seen, ToolResult | ToolError):
            return None
        if self._seen is None:  # a resumed run: what it saw so far, from its history
            self._seen = {outcome_key(c, s) for c, s in zip(history, history[1:-1], strict=False)
                          if isinstance(c, ToolCall) and isinstance(s, ToolResult | ToolError)
                          and c.call_id == s.call_id}
        outcome = outcome_key(call, seen)
        repeated = outcome in self._seen
        self._seen.add(outcome)
        return repeats + 1 if repeated else 0


def outcome_key(call: ToolCall, seen: ToolResult | ToolError) -> str:
    """A call and what came of it: the same tool, arguments and result (or error) give the same key."""
    outcome = {"result": seen.result} if isinstance(seen, ToolResult) else {"error": seen.error}
    return hashlib.sha256(canonical_json([call.tool, call.args, outcome]).encode()).hexdigest()[:24]
