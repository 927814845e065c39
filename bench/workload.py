"""The workload every system runs: a scripted policy, a no-op read-only tool and a no-op side effect.

Step k (1-based) of an n-step run calls `lookup` with a distinct query; with `pause=True` the
n-th step proposes `notify` (a side effect, so the run waits for approval) and the step after it
gives the final answer. The policy reads its position from the history length, so it costs the
same at step 1 and step 1,000.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from signoff.tools.base import Tool

GOAL = "benchmark: look things up, then notify the channel"
NOTIFY_ARGS = {"channel": "#ops", "text": "all lookups done"}


class LookupArgs(BaseModel):
    query: str


class NotifyArgs(BaseModel):
    channel: str
    text: str


def lookup_result(query: str) -> dict[str, Any]:
    return {"query": query, "hits": 1}


def notify_result(args: dict[str, Any]) -> dict[str, Any]:
    return {"sent": True, "channel": args["channel"]}


def decision(index: int, steps: int, pause: bool) -> dict[str, Any]:
    """The (0-based) index-th decision of an n-step run."""
    if pause and index == steps - 1:
        return {"tool": "notify", "args": dict(NOTIFY_ARGS)}
    if pause and index >= steps:
        return {"final": "notified"}
    return {"tool": "lookup", "args": {"query": f"q{index}"}}


def signoff_tools(sent: list[dict[str, Any]] | None = None) -> dict[str, Tool]:
    def notify(args: dict[str, Any], key: str) -> dict[str, Any]:
        if sent is not None:
            sent.append({"key": key, **args})
        return notify_result(args)

    return {
        "lookup": Tool("lookup", lambda args, key: lookup_result(args["query"]), args_model=LookupArgs),
        "notify": Tool("notify", notify, side_effect=True, args_model=NotifyArgs),
    }


class SignoffPolicy:
    """Signoff's history is [goal, (call, result) per step]; the policy stamps the time of each call."""

    def __init__(self, steps: int, pause: bool = False) -> None:
        self.steps, self.pause = steps, pause
        self.stamps: list[float] = []

    def __call__(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        self.stamps.append(time.perf_counter())
        return decision((len(history) - 1) // 2, self.steps, self.pause)


def intervals(stamps: list[float]) -> list[float]:
    """Time between consecutive policy calls: one whole step (tool, checkpoint, next prompt)."""
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


SERVE_TOOLS = list(signoff_tools().values())
"""The toolset `signoff serve` loads in the Slack benchmarks: `SIGNOFF_TOOLS=bench.workload:SERVE_TOOLS`."""

SERVE_SCRIPT = [{"tool": "lookup", "args": {"query": "q0"}}, {"tool": "notify", "args": NOTIFY_ARGS},
                {"final": "notified"}]
"""What the scripted model does in every run `signoff serve` starts: one lookup, one approval, an answer."""
