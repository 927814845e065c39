"""Records, hostile strings and side-effecting test tools for the Slack edge's tests."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from signoff.runtime.budget import Budget
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.state import call_digest, new_state
from signoff.tools.base import Tool, ToolFailed

# The fakes live in `tests/fakes`; the repository root on the path makes `tests.fakes` importable
# without putting `tests/` itself there, where its `runtime/` folder would shadow the real package.
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

HOSTILE = (
    "<!channel> <!here> <!everyone> <@U0BOSS> <#C0GENERAL> <https://evil.example|click me> "
    "&lt; & *bold* _it_ ~s~ `code` ```fence``` \u202e \u0000 @channel @here"
)


def make_run(**overrides: Any) -> RunRecord:
    run_id = overrides.pop("run_id", "run-0123456789")
    state = new_state(run_id, Budget(max_steps=8, max_tool_calls=5).to_json())
    state.update(overrides.pop("state", {}))
    values: dict[str, Any] = dict(
        run_id=run_id, goal="Refund order 42 and tell the customer", requester="U0ASKER",
        origin={"channel": "C0RUNS", "ts": "1700000000.000001"}, model="openai:gpt-4o-mini",
        status=state["status"], state=state, version=3, created_at=NOW, updated_at=NOW,
    )
    values.update(overrides)
    if "status" in overrides:
        values["state"] = {**values["state"], "status": overrides["status"]}
    return RunRecord(**values)


def make_approval(**overrides: Any) -> ApprovalRecord:
    values: dict[str, Any] = dict(
        approval_id="apr_Abc123_-xyz", run_id="run-0123456789", step=2, tool="issue_refund",
        args={"order_id": "42", "amount_usd": 19.99}, key="run-0123456789:2", status="pending",
        requester="U0ASKER", requested_at=NOW, expires_at=NOW + timedelta(minutes=30),
    )
    values.update(overrides)
    values.setdefault("digest", call_digest(values["tool"], values["args"], values["key"]))
    return ApprovalRecord(**values)


class Script:
    """A policy that replays decisions by position in the run (as a resumed run would)."""

    def __init__(self, *decisions: dict[str, Any]) -> None:
        self.decisions = list(decisions)
        self.histories: list[list[dict[str, Any]]] = []
        self._lock = threading.Lock()

    def __call__(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            self.histories.append(history)
        done = len({e["step"] for e in history if e["role"] == "assistant"})  # a turn of several calls is one
        if done >= len(self.decisions):
            return {"final": "script exhausted"}
        return dict(self.decisions[done])


class RefundArgs(BaseModel):
    order_id: str
    amount_usd: float


class LookupArgs(BaseModel):
    order_id: str


class Ledger:
    """Side-effecting test tools that count every call by idempotency key."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.args: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def refund(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        with self._lock:
            self.calls[key] += 1
            self.args.append(args)
        if args["amount_usd"] > 1000:
            raise ToolFailed("refunds over $1000 need finance")
        return {"refunded": args["amount_usd"], "order_id": args["order_id"], "key": key}

    def slow_refund(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        """Outlives its timeout: its outcome is unknown to the runner."""
        with self._lock:
            self.calls[key] += 1
        time.sleep(0.5)
        return {"refunded": args["amount_usd"]}

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def tools(self) -> dict[str, Tool]:
        refund = Tool("issue_refund", self.refund, side_effect=True, args_model=RefundArgs,
                      description="Refund part or all of an order to the customer's card.")
        lookup = Tool("lookup_order", lambda args, key: {"order_id": args["order_id"], "total": 19.99},
                      args_model=LookupArgs, description="Read one order.")
        slow = Tool("slow_refund", self.slow_refund, side_effect=True, args_model=RefundArgs, timeout_s=0.1,
                    description="A refund through a slow gateway.")
        return {t.name: t for t in (refund, lookup, slow)}


def tool_call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


def final(text: str) -> dict[str, Any]:
    return {"final": text}
