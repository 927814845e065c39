"""Budgets: hard limits on a run, checked before every policy call. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from signoff.runtime.schema import RunState

StateLike = RunState | Mapping[str, Any]
"""The typed state, or its JSON (as stored, as `agent.state` shows it)."""

LIMIT_TO_USAGE = {
    "max_steps": "steps",
    "max_tool_calls": "tool_calls",
    "max_tokens": "tokens",
    "max_cost_usd": "cost_usd",
    "max_seconds": "seconds",
}


@dataclass(frozen=True)
class Budget:
    """Limits for one run; `None` means unlimited (except steps, which is always bounded)."""

    max_steps: int = 8
    max_tool_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.max_steps is None:
            raise ValueError("max_steps must be a positive number, got None: a run's steps are always bounded")
        for name, value in asdict(self).items():
            if value is not None and (not isinstance(value, int | float) or value <= 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


COUNTED_LIMITS = ("max_steps", "max_tool_calls")
"""Limits that Extend raises by a number of steps (`extend_steps`); the others by a fraction."""
EXTEND_FRACTION = 0.5
"""How much of a cost, token or time limit one Extend adds: half as much again."""


def extension(limit: str, current: float, extend_steps: int) -> float:
    """`limit`'s value after one Extend: `extend_steps` more steps or tool calls, any other limit
    half as much again (an int stays an int)."""
    bump = extend_steps if limit in COUNTED_LIMITS else current * EXTEND_FRACTION
    return type(current)(current + bump) if current else bump


def used(state: StateLike, limit: str) -> float:
    """How much of the resource behind `limit` the run has used."""
    return _used(_figures(state), limit)


def exhausted_limit(state: StateLike) -> str | None:
    """The first limit the run has reached, or None if another policy call is allowed."""
    figures = _figures(state)
    for limit in LIMIT_TO_USAGE:
        value = figures.budget.get(limit)
        if value is not None and _used(figures, limit) >= value:
            return limit
    return None


def usage_report(state: StateLike) -> dict[str, Any]:
    """Each limit with its usage, e.g. {"max_steps": {"used": 8, "limit": 8}}."""
    figures = _figures(state)
    return {
        limit: {"used": _used(figures, limit), "limit": figures.budget.get(limit)}
        for limit in LIMIT_TO_USAGE
        if figures.budget.get(limit) is not None
    }


class _Figures(NamedTuple):
    """Read before every policy call: a tuple is the cheapest record to make."""

    budget: Mapping[str, Any]
    usage: Mapping[str, Any]
    steps: int


def _used(figures: _Figures, limit: str) -> float:
    match LIMIT_TO_USAGE[limit]:
        case "steps":
            return float(figures.steps)
        case "tokens":
            return float(figures.usage["input_tokens"] + figures.usage["output_tokens"])
        case other:
            return float(figures.usage[other])


def _figures(state: StateLike) -> _Figures:
    """The limits, the usage and the step count of `state`, typed or not (read once per question:
    this runs before every policy call)."""
    if isinstance(state, RunState):
        return _Figures(state.budget.__dict__, state.usage.__dict__, state.steps)
    return _Figures(state["budget"], state["usage"], state["steps"])
